"""Render a table: the paper's value, ours (mean ± std over seeds) and the difference, per cell.

Pure functions from (spec, paper values, run records) to rows; then one formatter per output format.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
import textwrap
from collections import Counter
from pathlib import Path

from repro.config import RecipeError, resolve
from repro.judging import judged_overrides, judged_records
from repro.markdown import escape
from repro.model import version as model_code
from repro.model.variants import VARIANTS
from repro.results import current_records, metric_at, recipes_dir, stale_note, stretch_hardware
from repro.provenance import machine
from repro.tables import paper_values as pv
from repro.tables.spec import SPECS, TITLES, TableSpec

LOWER_IS_BETTER = {"lm", "asr"}
FORMATS = ("text", "markdown", "latex", "csv", "json")
def ours_cell(records: list[dict], paths: list[list[str]]) -> dict:
    """Aggregate the records of one cell: status ok / failed / not run / not evaluated, mean, std, seeds."""
    if not records:
        return {"status": "not run", "mean": None, "std": None, "seeds": 0}
    failed = [r for r in records if r["status"] == "failed"]
    found = lambda m: next((v for p in paths if (v := metric_at(m, p)) is not None), None)
    values = [v for r in records if r["status"] == "completed" and (v := found(r["metrics"])) is not None]
    if not values:
        # "failed" only when every seed failed: a trained seed without this metric (per-year BLEU at reduced
        # scale) leaves the column unevaluated, not failed
        status = ("failed" if len(failed) == len(records) else
                  "not evaluated" if not any(r.get("metrics") for r in records) else "no such column")
        return {"status": status, "mean": None, "std": None, "seeds": len(records)}
    std = statistics.stdev(values) if len(values) > 1 else None
    return {"status": "ok", "mean": statistics.fmean(values), "std": std, "seeds": len(values),
            "failed_seeds": len(failed)}


def table_rows(number: int, scale: str, results_dir: Path, paper_version: str = "en",
               sets: list[str] | None = None) -> tuple[TableSpec, list[str], list[dict]]:
    """The table's cells: the paper's value and ours; with `sets` (an ablation: `--set KEY=VALUE`), also ours from
    the runs of each cell's recipe with those overrides (`row["set"]`)."""
    if number not in SPECS:
        raise KeyError(f"table {number}: tables 1-6, 9, 10 and 11 (the extension) compare runs; 7 and 8 are "
                       f"rendered from the recipes and the records")
    spec = SPECS[number]
    if paper_version == "ja":
        if number not in pv.JA:
            raise KeyError(f"table {number}: the Japanese version has no such table (it has tables for "
                           f"English tables {', '.join(map(str, pv.JA))})")
        values, columns = pv.JA[number], (pv.JA_NEWSTEST if number == 1 else spec.columns)
    elif paper_version == "en":
        values, columns = pv.EN[number], spec.columns
    else:
        raise ValueError(f"--paper {paper_version!r}: expected en or ja")
    by_recipe, stale = judged_records(results_dir, scale)
    if sets:  # a wrong key or value is one line before any record is read
        first = next(iter(spec.groups.items()))
        resolve(recipes_dir() / f"{spec.recipe_name(first[0], first[1][0])}.yaml", scale, list(sets))
        ablation = judged_overrides(results_dir, scale, sets)
    rows = []
    for group, methods in values.items():
        for method, paper in methods.items():
            recs = by_recipe.get(spec.recipe_name(group, method), [])
            for i, col in enumerate(columns):
                p = paper if paper == pv.FAILED else (paper[i] if paper is not None else None)
                if paper == pv.FAILED and col == "Average":
                    p = "N/A"
                ours = ours_cell(recs, spec.metric_paths(col))
                if ours["status"] == "not run" and stale.get(spec.recipe_name(group, method)):
                    ours["status"] = "stale"  # records of an earlier version of the recipe: not counted
                # a difference only where both numbers are of one dataset: below paper scale ours are of another
                delta = ((ours["mean"] - p) if scale == "paper" and isinstance(p, float) and ours["mean"] is not None
                         else None)
                rows.append({"table": number, "group": group, "method": method, "metric": col, "paper": p,
                             "ours": ours["mean"], "std": ours["std"], "delta": delta, "seeds": ours["seeds"],
                             "failed_seeds": ours.get("failed_seeds", 0), "scale": scale, "status": ours["status"],
                             "recipe": f"recipes/{spec.recipe_name(group, method)}.yaml"})
                if sets:
                    cell = ours_cell(ablation.get(spec.recipe_name(group, method), []), spec.metric_paths(col))
                    rows[-1]["set"] = {"ours": cell["mean"], "std": cell["std"], "seeds": cell["seeds"],
                                       "failed_seeds": cell.get("failed_seeds", 0), "status": cell["status"]}
    return spec, columns, rows


def table_notes(number: int, scale: str, results_dir: Path) -> list[str]:
    """What the cells of a table need said beside them: each failed seed with the rule's reason, and why a
    cell's records are stale. Read from the records (judged by the current rules), never written by hand."""
    spec = SPECS[number]
    by_recipe, stale = judged_records(results_dir, scale)
    notes = []
    for group, methods in spec.groups.items():
        for method in methods:
            name = spec.recipe_name(group, method)
            for r in sorted(by_recipe.get(name, []), key=lambda r: r["seed"]):
                if r["status"] == "failed":
                    notes.append(f"{group} {TITLES[method]} seed {r['seed']}: training failed: {r.get('reason', '')}")
                elif r.get("note"):
                    notes.append(f"{group} {TITLES[method]} seed {r['seed']}: {r['note']}")
            if name in stale:  # listed, never dropped in silence, whether or not current records fill the cell
                notes.append(f"{group} {TITLES[method]}: {stale_note(name, stale[name])}")
            versions = Counter(model_code.of_record(r) for r in by_recipe.get(name, []))
            if len(versions) > 1:
                notes.append(f"{group} {TITLES[method]}: records of model-code versions "
                             + ", ".join(f"{v} ({n} seeds)" for v, n in sorted(versions.items())))
    methods = dict.fromkeys(m for ms in spec.groups.values() for m in ms)
    notes += [f"{TITLES[m]}: {VARIANTS[m].note}" for m in methods if m in VARIANTS and VARIANTS[m].note]
    return notes


def _fmt_paper(p) -> str:
    return "—" if p is None else p if isinstance(p, str) else f"{p:.2f}"


def _fmt_ours(row: dict) -> str:
    if row["status"] == "failed":
        return pv.FAILED
    if row["status"] == "no such column":
        return "n/a"  # evaluated, but this scale has no such metric (per-year BLEU at reduced scale)
    if row["status"] == "not evaluated":
        return "not evaluated"  # trained; `lnrepro evaluate RUN` scores it
    if row["status"] != "ok":
        return row["status"]
    s = f"{row['ours']:.2f}"
    if row["std"] is not None:
        s += f" ± {row['std']:.2f}"
    if row["failed_seeds"]:  # the mean above leaves them out, so say how many
        s += f"; {row['failed_seeds']} of {row['failed_seeds'] + row['seeds']} seeds failed"
    return s


def _cell_text(row: dict) -> str:
    text = f"{_fmt_paper(row['paper'])} / {_fmt_ours(row)}"
    if row["delta"] is not None:
        text += f" ({row['delta']:+.2f})"
    if "set" in row:
        text += f" / {_fmt_ours(row['set'])}"
    return text


def _set_caption(sets: list[str] | None) -> str:
    return (f" After ours: ours with --set {' --set '.join(sets)} (the runs of `lnrepro train RECIPE --set ...`, "
            "kept apart from the recipe's own)." if sets else "")


def _grid(rows: list[dict], columns: list[str]):
    """(group, method) -> {column: row} in table order."""
    grid: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        grid.setdefault((r["group"], r["method"]), {})[r["metric"]] = r
    return grid


def _caption(spec: TableSpec, scale: str, paper_version: str) -> str:
    cap = (f"Table {spec.number}: {spec.title}. Each cell: paper / ours (difference); ours at scale '{scale}', "
           f"mean ± std over the seeds that trained." if scale == "paper" else
           f"Table {spec.number}: {spec.title}. Each cell: paper / ours; ours at scale '{scale}', mean ± std over "
           f"the seeds that trained, on smaller data than the paper's, so no difference is taken.")
    if paper_version == "ja":
        cap += f" Paper values from the Japanese version ({pv.JA_TABLE_NUMBERS[spec.number]})."
    if spec.number in pv.ERRATA and paper_version == "en":
        cap += " Erratum: " + pv.ERRATA[spec.number]
    if scale != "paper" and spec.task == "mt":
        cap += " At reduced scale the per-year columns stay empty and 'Average' is the mean BLEU over the " \
               "recipe's own test sets (Multi30k for mini)."
    return cap


def markdown(spec, columns, rows, scale, paper_version, notes=()) -> str:
    lines = [f"**{_caption(spec, scale, paper_version)}**", "",
             "| Method | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    group = None
    for (g, method), cells in _grid(rows, columns).items():
        if g != group:
            lines.append(f"| *{spec.group_label}: {g}* |" + " |" * len(columns))
            group = g
        lines.append(f"| {TITLES[method]} | " + " | ".join(_cell_text(cells[c]) for c in columns) + " |")
    if notes:
        lines += ["", *(f"- {escape(n)}" for n in notes)]
    return "\n".join(lines) + "\n"


def latex(spec, columns, rows, scale, paper_version, sets=None) -> str:
    esc = lambda s: s.replace("±", r"$\pm$").replace("_", r"\_").replace("%", r"\%")
    out = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{l" + "c" * len(columns) + "}",
           r"\toprule", "Method & " + " & ".join(columns) + r" \\"]
    group = None
    for (g, method), cells in _grid(rows, columns).items():
        if g != group:
            out += [r"\midrule", rf"\multicolumn{{{len(columns) + 1}}}{{l}}{{{spec.group_label}: {g}}} \\"]
            group = g
        out.append(esc(TITLES[method]) + " & " + " & ".join(esc(_cell_text(cells[c])) for c in columns) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{esc(_caption(spec, scale, paper_version) + _set_caption(sets))}}}",
            r"\end{table}"]
    return "\n".join(out) + "\n"


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    sets = bool(rows) and "set" in rows[0]
    w.writerow(["table", "group", "method", "metric", "paper", "ours", "scale", "status", "seeds", "failed_seeds",
                *(["set_ours", "set_status", "set_seeds", "set_failed_seeds"] if sets else [])])
    number = lambda v: "" if v is None else f"{v:.4f}"
    for r in rows:
        paper = "" if r["paper"] is None else r["paper"] if isinstance(r["paper"], str) else f"{r['paper']:.2f}"
        w.writerow([r["table"], r["group"], r["method"], r["metric"], paper, number(r["ours"]), r["scale"],
                    r["status"], r["seeds"], r["failed_seeds"],
                    *([number(r["set"]["ours"]), r["set"]["status"], r["set"]["seeds"], r["set"]["failed_seeds"]]
                      if sets else [])])
    return buf.getvalue()


TEXT_WIDTH = 80  # every text-mode listing fits 80 columns, in a terminal and in a pipe alike


def wrap(text: str, indent: str = "") -> str:
    """A paragraph of a text-mode listing within TEXT_WIDTH, its later lines indented; words never split."""
    return textwrap.fill(text, TEXT_WIDTH, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def plain_table(headers: list[str], rows: list[list[str]], width: int = TEXT_WIDTH) -> str:
    """Columns aligned with two spaces, the last one unpadded: the same in a terminal and in a pipe, and a long
    last cell never pushes the others apart. A line that would pass `width` wraps its last cell under itself, or,
    where the other columns leave it under 20 characters, on indented lines of its own."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    indent = sum(widths) + 2 * len(widths)

    def line(cells) -> str:
        head = "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))
        last = str(cells[-1])
        if len(head) + 2 + len(last) <= width:
            return f"{head}  {last}".rstrip()
        if width - indent >= 20:
            parts = textwrap.wrap(last, width - indent, break_on_hyphens=False) or [""]
            return "\n".join([f"{head}  {parts[0]}", *(" " * indent + p for p in parts[1:])])
        return head.rstrip() + "\n" + "\n".join(textwrap.wrap(last, width - 4, initial_indent="    ",
                                                             subsequent_indent="    ", break_on_hyphens=False))
    return "\n".join([line(headers), *(line(r) for r in rows)]) + "\n"


def text(spec, columns, rows, scale, paper_version, notes=()) -> str:
    """A plain aligned table, one line per cell (group, method, column): paper, difference, ours; never wider than
    its longest cell, so it fits 80 columns whatever the table."""
    lines = [_caption(spec, scale, paper_version).replace("Each cell: paper / ours (difference); ours", "Ours")
             .replace("Each cell: paper / ours; ours", "Ours"), ""]
    short = lambda v: v.replace(pv.FAILED, "failed")  # "Training failed" in a narrow column
    diff = scale == "paper"  # below it the two numbers are of different datasets: no Diff column
    sets = "set" in rows[0] if rows else False
    body = [[r["group"], TITLES[r["method"]], r["metric"], short(_fmt_paper(r["paper"])),
             *(["" if r["delta"] is None else f"{r['delta']:+.2f}"] if diff else []), short(_fmt_ours(r)),
             *([short(_fmt_ours(r["set"]))] if sets else [])]
            for r in rows]
    table = plain_table([spec.group_label, "Method", "Column", "Paper", *(["Diff"] if diff else []), "Ours",
                         *(["With --set"] if sets else [])], body)
    wrap = lambda t, first="", rest="": "\n".join(textwrap.wrap(t, 80, initial_indent=first, subsequent_indent=rest,
                                                                break_on_hyphens=False))
    return wrap(lines[0]) + "\n\n" + table + "".join(wrap(n, "- ", "  ") + "\n" for n in notes)


def render_table(number: int, scale: str = "paper", fmt: str = "text", results_dir: Path = Path("results"),
                 paper_version: str = "en", sets: list[str] | None = None) -> str | None:
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if sets and number in (7, 8):
        raise ValueError(f"--set: table {number} is read from the recipes and records, not compared with runs")
    if number == 7:
        return render_table7(fmt)
    if number == 8:
        return render_table8(fmt, results_dir, scale)
    spec, columns, rows = table_rows(number, scale, results_dir, paper_version, sets)
    notes = table_notes(number, scale, results_dir) + ([_set_caption(sets).strip()] if sets else [])
    if fmt == "csv":
        return to_csv(rows)
    if fmt == "json":
        return json.dumps({"table": number, "title": spec.title, "scale": scale, "paper": paper_version,
                           **({"sets": list(sets)} if sets else {}), "columns": columns, "rows": rows,
                           "notes": notes}, indent=2) + "\n"
    if fmt == "markdown":
        return markdown(spec, columns, rows, scale, paper_version, notes)
    if fmt == "latex":
        return latex(spec, columns, rows, scale, paper_version, sets)
    return text(spec, columns, rows, scale, paper_version, notes)


# -- Tables 7 and 8 ---------------------------------------------------------------------------------------------

TASK_RECIPES = {"Machine Translation": "6L-6L-b2t", "Abstractive Summarization": "gigaword/6L-6L-b2t",
                "Language Model": "wikitext103/6L-b2t", "ASR": "librispeech/6L-6L-b2t"}


def _from_recipe(name: str) -> list:
    try:
        r = resolve(recipes_dir() / f"{name}.yaml").recipe
    except RecipeError:
        return [None] * 9
    return [r.model.d_model, r.model.ffn_dim, r.model.heads, r.optim.lr, "inverse sqrt",
            f"({r.optim.betas[0]}, {r.optim.betas[1]})", r.optim.warmup_updates, r.optim.max_updates,
            r.data.max_tokens]


def table7_rows() -> list[dict]:
    ours = {task: _from_recipe(name) for task, name in TASK_RECIPES.items()}
    rows = []
    for i, (param, paper) in enumerate(pv.TABLE7.items()):
        for j, task in enumerate(TASK_RECIPES):
            o = ours[task][i]
            rows.append({"table": 7, "group": task, "method": param, "metric": param, "paper": paper[j],
                         "ours": o, "scale": "paper", "status": "ok" if str(o) == str(paper[j]) or o == paper[j]
                         else "differs"})
    return rows


def one_machine(rec: dict) -> bool:
    """Whether a run trained on one machine throughout (one begun on a GPU and finished on a CPU did not: its hours
    are neither machine's)."""
    return len({machine(hw) for hw in stretch_hardware(rec)}) == 1


def table8_rows(results_dir: Path, scale: str) -> list[dict]:
    """The paper's cost per row beside ours, one pair of rows per machine our runs used: hours are never averaged
    over different machines, and a run trained on two is left out."""
    records = [r for recs in current_records(results_dir, scale)[0].values() for r in recs]
    rows = []
    for task, groups in pv.TABLE8.items():
        for group, (gpus, hours) in groups.items():
            by_machine: dict[str, list[dict]] = {}
            for r in records:
                if r["task"] == task and r["status"] == "completed" and one_machine(r) and (
                        f"{r['decoder_layers']}L" if task == "lm" else
                        f"{r['encoder_layers']}L-{r['decoder_layers']}L") == group:
                    by_machine.setdefault(machine(r["hardware"]), []).append(r)
            for where, recs in by_machine.items() or [(None, [])]:
                method = f"{group} ({len(recs)} run{'s' if len(recs) > 1 else ''})" if recs else group
                ours_h = statistics.fmean(r["duration_s"] / 3600 for r in recs) if recs else None
                status = "ok" if recs else "not run"
                rows.append({"table": 8, "group": task, "method": method, "metric": "#GPU", "paper": gpus,
                             "ours": where, "scale": scale, "status": status})
                rows.append({"table": 8, "group": task, "method": method, "metric": "Time (hour)", "paper": hours,
                             "ours": ours_h, "scale": scale, "status": status})
    return rows


def _simple(rows: list[dict], fmt: str, title: str, scale: str) -> str | None:
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["table", "group", "method", "metric", "paper", "ours", "scale", "status"])
        for r in rows:
            ours = "" if r["ours"] is None else (f"{r['ours']:.4f}" if isinstance(r["ours"], float) else r["ours"])
            w.writerow([r["table"], r["group"], r["method"], r["metric"], r["paper"], ours, r["scale"], r["status"]])
        return buf.getvalue()
    if fmt == "json":
        return json.dumps({"title": title, "rows": rows}, indent=2) + "\n"
    # Table 8's hours to two decimals; Table 7's hyper-parameters as written (a learning rate of 0.001)
    show = lambda v: ("not run" if v is None else f"{v:.2f}" if isinstance(v, float) and rows[0]["table"] == 8
                      else f"{v:g}" if isinstance(v, float) else str(v))
    # a Metric column that only repeats the Row (Table 7) is left out of the tables people read
    metric = any(r["metric"] != r["method"] for r in rows)
    cells = lambda r: [r["group"], r["method"], *([r["metric"]] if metric else []), str(r["paper"]), show(r["ours"])]
    head = ["Task", "Row", *(["Metric"] if metric else []), "Paper", "Ours"]
    if fmt == "markdown":
        lines = [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    if fmt == "latex":
        lines = [r"\begin{tabular}{llllr}", r"\toprule", r"Task & Row & Metric & Paper & Ours \\", r"\midrule"]
        lines += [f"{r['group']} & {r['method']} & {r['metric']} & {r['paper']} & {show(r['ours'])} \\\\" for r in rows]
        lines += [r"\bottomrule", r"\end{tabular}"]
        return "\n".join(lines).replace("β", r"$\beta$") + "\n"
    from rich.table import Table
    from rich.text import Text

    from repro.progress import console
    t = Table(title=title)
    for c in ("Task", "Row", "Metric", "Paper", "Ours"):
        t.add_column(c)
    for r in rows:
        ours = show(r["ours"])
        if r["status"] == "differs":
            ours = Text(ours, style="yellow")
        t.add_row(Text(r["group"]), Text(r["method"]), Text(r["metric"]), Text(str(r["paper"])),
                  ours if isinstance(ours, Text) else Text(ours))
    if not console.is_terminal or console.measure(t).maximum > console.width:
        # piped or narrow: plain text within 80 columns, never truncated
        return wrap(title) + "\n\n" + plain_table(head, [cells(r) for r in rows])
    console.print(t)
    return None


def render_table7(fmt: str) -> str | None:
    return _simple(table7_rows(), fmt, "Table 7: hyper-parameters (paper vs. our paper-scale recipes)", "paper")


def render_table8(fmt: str, results_dir: Path, scale: str) -> str | None:
    return _simple(table8_rows(results_dir, scale), fmt,
                   f"Table 8: GPUs and hours per model (paper vs. our '{scale}' runs)", scale)
