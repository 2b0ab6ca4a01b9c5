"""Every run behind a scale's tables, one row per record: what it was, how it ended, where and how long it ran;
and the runs still missing, by the seeds each cell needs.

Read from the records alone (the current recipe's, as tables read them), so the lists of runs made and still to
make can never disagree with the numbers the tables show.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from repro.judging import judged_overrides, judged_records
from repro.markdown import escape
from repro.model import version
from repro.needed import SEEDS_COMPARED, SEEDS_ELSEWHERE, missing_runs, seed_span
from repro.pace import missing_compute
from repro.provenance import in_history, where
from repro.results import load_records, record_path, stretch_hardware, stretches
from repro.tables.render import plain_table, wrap
from repro.tables.spec import TITLES

RUN_FORMATS = ("text", "markdown", "csv", "json")
COLUMNS = ("Recipe", "Seed", "Status", "Updates", "Training", "Evaluation", "Machine", "Stretches", "Started",
           "Commit", "Model code")


def run_rows(results_dir: Path, scale: str) -> list[dict]:
    """One row per current record, by recipe then seed, then one per record of a run with --set overrides (an
    ablation); its status the judging rules' (a run that learned nothing has failed), its model-code version (the
    claims judge the seeds of one version together); seconds stay seconds (the formats round them)."""
    current, _ = judged_records(results_dir, scale)
    ablations = judged_overrides(results_dir, scale)
    rows = []
    for name, rec in [(n, r) for records in (current, ablations) for n in sorted(records)
                      for r in sorted(records[n], key=lambda r: (r.get("overrides"), r["seed"]))]:
        metrics = rec.get("metrics") or {}
        trained_on = trained_where(rec)
        evaluated_on = where(metrics["eval_hardware"]) if metrics.get("eval_hardware") else trained_on
        rows.append({"recipe": name, "seed": rec["seed"], "status": rec["status"], "reason": rec.get("reason", ""),
                     "updates": rec.get("updates"), "training_s": rec.get("duration_s"),
                     "evaluation_s": metrics.get("eval_seconds"), "machine": trained_on,
                     "evaluated_on": evaluated_on, "stretches": len(rec.get("segments") or []) or 1,
                     "started": rec.get("started", ""), "commit": ", ".join(short_commit(c, 12) for c in commits(rec)),
                     "model_code": version.of_record(rec), "overrides": rec.get("overrides") or []})
    return rows


def commits(rec: dict) -> list[str]:
    """The commits a run's code came from, one per run of stretches that kept it, in order (the record's own for a
    stretch of before stretches kept one)."""
    out = []
    for part in stretches(rec):
        c = str(part.get("commit") or rec.get("commit", ""))
        if not out or out[-1] != c:
            out.append(c)
    return out


def short_commit(commit: str, n: int) -> str:
    """A commit's first n hex digits, keeping git's -dirty: the work tree it ran from had uncommitted changes, so
    its code is that commit's only in part."""
    return commit[:n] + ("-dirty" if commit.endswith("-dirty") else "")


def provenance_gaps(results_dir: Path, scale: str) -> list[str]:
    """What keeps a record's code or course from being known exactly (every record of the scale: stale ones and
    those of runs with --set too), one line each: a stretch trained from uncommitted changes (-dirty), a commit this
    checkout's history lacks, no training log beside the record."""
    known: dict[str, bool | None] = {}
    out = []
    for rec in load_records(results_dir, scale):
        path = record_path(results_dir, scale, rec["recipe_name"], rec["seed"], rec.get("overrides"),
                           rec.get("recipe_hash", ""))
        for c in commits(rec):
            if c.endswith("-dirty"):
                out.append(f"{path}: trained from {c[:12]} with uncommitted changes")
                continue
            if c not in known:
                known[c] = in_history(c)
            if known[c] is False:
                out.append(f"{path}: commit {c[:12]!r} is not in this checkout's history")
        if not path.with_suffix(".log.jsonl").is_file():
            out.append(f"{path}: no training log beside it ({path.with_suffix('.log.jsonl').name})")
    return out


def trained_where(rec: dict) -> str:
    """The machine a run trained on, in words; a run trained on more than one (begun on a GPU machine, resumed on a
    CPU) names each, in order, with the updates made there."""
    spans: list[list] = []  # [machine, first update, last update], a machine's consecutive stretches as one
    for part, hw in zip(stretches(rec), stretch_hardware(rec)):
        if spans and spans[-1][0] == where(hw):
            spans[-1][2] = part.get("to_update")
        else:
            spans.append([where(hw), part.get("from_update"), part.get("to_update")])
    if len(spans) < 2:
        return where(rec.get("hardware") or {})
    return ", then ".join(f"{machine} (updates {first}-{last})" for machine, first, last in spans)


def _minutes(seconds) -> str:
    return "?" if seconds is None else f"{seconds / 60:.0f} min"


def _cells(row: dict) -> list[str]:
    evaluation = "none" if row["evaluation_s"] is None else f"{row['evaluation_s']:.0f} s"
    if row["evaluation_s"] is not None and row["evaluated_on"] != row["machine"]:
        evaluation += f" on {row['evaluated_on']}"
    recipe = row["recipe"] + (f" (--set {' '.join(row['overrides'])})" if row["overrides"] else "")
    return [recipe, str(row["seed"]), row["status"], str(row["updates"] or "?"), _minutes(row["training_s"]),
            evaluation, row["machine"], str(row["stretches"]), row["started"][:10],
            ", ".join(short_commit(c, 7) for c in row["commit"].split(", ")),
            row["model_code"]]


def render_runs(results_dir: Path, scale: str, fmt: str = "text") -> str:
    if fmt not in RUN_FORMATS:
        raise ValueError(f"--format {fmt!r}: expected one of {', '.join(RUN_FORMATS)}")
    rows = run_rows(results_dir, scale)
    ablations = [r for r in rows if r["overrides"]]
    title = f"Runs at scale '{scale}': {len(rows) - len(ablations)} records of the current recipes" + (
        f", {len(ablations)} of runs with --set" if ablations else "")
    if fmt == "json":
        return json.dumps({"scale": scale, "rows": rows}, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["recipe"], lineterminator="\n")
        writer.writeheader()
        writer.writerows({**r, "overrides": " ".join(r["overrides"])} for r in rows)
        return buf.getvalue()
    if fmt == "markdown":
        lines = [f"**{title}**", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(escape(c) for c in _cells(r)) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    mine = [r for r in rows if not r["overrides"]]
    # compact, one line a run, the machine last so its long name never pushes the others apart; the other formats
    # keep every column (stretches, start, commit, where the evaluation ran)
    eval_s = lambda r: "none" if r["evaluation_s"] is None else f"{r['evaluation_s']:.0f} s"
    body = [[r["recipe"], str(r["seed"]), r["status"], str(r["updates"] or "?"), _minutes(r["training_s"]),
             eval_s(r), r["machine"]] for r in mine]
    out = (wrap(f"{title} (all columns: --format markdown)") + "\n\n"
           + plain_table(["Recipe", "Seed", "Status", "Updates", "Training", "Eval", "Machine"], body))
    if ablations:  # an ablation's runs apart, each with its overrides (`lnrepro table N --set ...` compares them)
        out += "\n" + wrap("Runs with --set (lnrepro table N --set KEY=VALUE shows them beside the recipe's):") + "\n\n"
        out += plain_table(["Recipe", "Seed", "Status", "Updates", "Training", "With"],
                           [[r["recipe"], str(r["seed"]), r["status"], str(r["updates"] or "?"),
                             _minutes(r["training_s"]), " ".join(r["overrides"])] for r in ablations])
    return out


def older_note(older: int) -> str:
    return f" ({older} record{'s' if older > 1 else ''} of older versions kept)" if older else ""


def render_missing(results_dir: Path, scale: str, fmt: str = "text") -> str:
    """The missing runs as a Markdown list, as plain text within 80 columns, or as JSON/CSV."""
    if fmt not in RUN_FORMATS:
        raise ValueError(f"--format {fmt!r}: expected one of {', '.join(RUN_FORMATS)}")
    rows = missing_runs(results_dir, scale)
    if fmt == "json":
        costs, machines = missing_compute(results_dir, scale, rows)
        return json.dumps({"scale": scale, "rows": rows, "compute": costs,
                           "machines": {label: m["words"] for label, m in machines.items()}}, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["table", "group", "method", "recipe", "seeds", "needed", "command"])
        for r in rows:
            writer.writerow([r["table"], r["group"], r["method"], r["recipe"], " ".join(map(str, r["seeds"])),
                             r["needed"], r["command"]])
        return buf.getvalue()
    count = sum(len(r["seeds"]) for r in rows)
    head = (f"**Still to run at scale '{scale}': {count} runs** ({SEEDS_COMPARED} seeds for Table 1 and every cell "
            f"a claim compares, more where an inconclusive comparison needs them to detect the paper's difference; "
            f"{SEEDS_ELSEWHERE} elsewhere; `lnrepro reproduce N --scale {scale} --plan` costs them on a machine)")
    if not rows:
        return (head if fmt == "markdown" else plain(head)) + "\n\nnone\n"
    lines = [f"- Table {r['table']}, {r['group']} {TITLES[r['method']]}: seed{'s' if len(r['seeds']) > 1 else ''} "
             f"{seed_span(r['seeds'])} to have {r['needed']}{' (power)' if r['by_power'] else ''} at model code "
             f"{r['version']}{older_note(r['older'])} (`{r['command']}`)" for r in rows]
    costs, machines = missing_compute(results_dir, scale, rows)
    if fmt == "markdown":
        return "\n".join([head, "", *lines, "", render_compute(costs, machines)]) + "\n"
    # text: the same, plain and within 80 columns, each command whole on a line of its own
    text = [plain(x.rsplit(" (`", 1)[0], "  ") + f"\n    {r['command']}" for x, r in zip(lines, rows)]
    return "\n".join([plain(head), "", *text, "", compute_text(costs, machines)]) + "\n"


def plain(text: str, indent: str = "") -> str:
    """A line of the Markdown forms above as plain text within 80 columns: no emphasis or code marks."""
    return wrap(text.replace("**", "").replace("`", ""), indent)


def compute_text(costs: list[dict], machines: dict[str, dict]) -> str:
    """render_compute's table as plain lines, one per task and depth, within 80 columns."""
    labels = sorted({label for c in costs for label in c["seconds"]}, key=lambda x: ("thread" in x, x))
    hours = lambda s: f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"
    out = [plain("The compute they need: hours of training at the pace the records kept (of the recipe, else of "
                 "its depth) on each machine that priced them; evaluation adds minutes.")]
    if not labels:
        return out[0] + " No record keeps a pace yet."
    for c in costs:
        priced = [f"{hours(c['seconds'][label])} on {label}" for label in labels if label in c["seconds"]]
        out.append(plain(f"- {c['task']} {c['depth']}, {c['runs']} runs: {'; '.join(priced) or 'not priced'}",
                         "  "))
    names = {label.split(",")[0]: machines[label]["words"] for label in labels}
    out.append(plain("Machines: " + "; ".join(f"{short}: {full}" for short, full in names.items()) + "."))
    return "\n".join(out)


def render_compute(costs: list[dict], machines: dict[str, dict]) -> str:
    """The missing runs' hours of training per task and depth (rows) on each machine the records trained on
    (columns, GPUs first), with each machine's full name."""
    labels = sorted({label for c in costs for label in c["seconds"]}, key=lambda x: ("thread" in x, x))
    head = ("**The compute they need**: hours of training, at the pace the records kept of each recipe (else of its "
            "depth) on each machine, CPUs at the threads a run had (runs of one thread train side by side, one per "
            "core); evaluation adds minutes; \"-\": that depth never trained there")
    if not labels:
        return head + ": no record keeps a pace yet\n"
    hours = lambda s: "-" if s is None else f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"
    table = ["| task | depth | runs | " + " | ".join(labels) + " |", "|---|---|---|" + "---|" * len(labels)]
    table += [f"| {c['task']} | {c['depth']} | {c['runs']} | "
              + " | ".join(hours(c["seconds"].get(label)) for label in labels) + " |" for c in costs]
    names = {label.split(",")[0]: machines[label]["words"] for label in labels}  # a machine's thread counts: one name
    legend = "; ".join(f"{short}: {full}" for short, full in names.items())
    return "\n".join([head + ":", "", *table, "", f"Machines: {legend}."])


