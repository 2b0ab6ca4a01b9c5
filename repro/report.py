"""Pages generated from the records and the command line, never edited by hand (tests regenerate and compare):
docs/results-<scale>.md (every table, the claims with their statistics, the figures, the runs made and those still
to make), docs/cli.md (every command's --help, from the command line it is given), and the README's blocks (the
claims' verdicts, the regime, and what the runs still to make cost)."""

from __future__ import annotations

from pathlib import Path

from repro import calibration, calibration_v2_1
from repro.calibration import TASKS as CALIBRATION_TASKS
from repro.claims import rules_line, verdict_counts
from repro.config import resolve
from repro.files import atomic_write_text, read_json
from repro.findings import render_findings, render_still_to_run
from repro.judging import CURRENT, RULES
from repro.markdown import escape
from repro.needed import SEEDS_COMPARED
from repro.progress import console
from repro.provenance import where
from repro.results import recipes_dir
from repro.run_list import render_missing, render_runs
from repro.tables.render import render_table
from repro.tables.spec import SPECS
from repro.verdicts import evaluate_claims, render_changed, render_claims

# (figure file under results/figures/, what it shows, the command that draws it)
FIGURES = [
    ("figure3.png", "Figure 3: gradient norm per layer at initialisation, 18L-18L", "lnrepro figure 3"),
    ("figure4.png", "Figure 4: gradient norms inside the last decoder layer of an 18L-18L Post-LN model",
     "lnrepro figure 4"),
    ("figure7.png", "Figure 7: the same inside its 1st and 9th decoder layers", "lnrepro figure 7"),
    ("figure1_{scale}.png", "Figure 1: training loss of 18L-18L MT, seed 1", "lnrepro figure 1 --scale {scale}"),
    ("figure5_{scale}.png", "Figure 5: cosine similarity among the layer outputs of trained 6L-6L MT models",
     "lnrepro figure 5 --scale {scale}"),
    ("figure6_{scale}.png", "Figure 6: validation NLL of 18L-18L MT, seed 1", "lnrepro figure 6 --scale {scale}"),
    ("figure8_{scale}.png", "Figure 8: best validation NLL of MT against its total layers, encoder and decoder equal",
     "lnrepro figure 8 --scale {scale}"),
    ("figure9_{scale}.png", "Figure 9: validation NLL of 36L-36L MT, seed 1", "lnrepro figure 9 --scale {scale}"),
]


def _numbers(row: dict) -> tuple[str, str, str]:
    """(seeds per cell, difference with its interval, p) of a claim, for the README: its comparison's, or for a
    claim of several the deciding one's (the first with the claim's verdict, else the weakest)."""
    judged = [j for j in row.get("comparisons", []) if "diff" in (j.get("test") or {})]
    if judged:
        j = next((j for j in judged if j["verdict"] == row["verdict"]), max(judged, key=lambda j: j["test"]["p"]))
        t = j["test"]
        ci, level = (t["ci95"], "95%") if "ci95" in t else (t["ci90"], "90%")
        n = " vs ".join(str(x) for x in t["n"])
        against = f" (vs {j['cells'][1].split('/')[-1]})" if len(row["comparisons"]) > 1 else ""
        return n + against, f"{t['diff']:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}] {level}", f"{t['p']:.3f}"
    fixed = [j for j in row.get("comparisons", []) if j["verdict"] == row["verdict"]]
    if fixed:  # settled without a test: a cell failed on most seeds, or too few seeds for the first look
        return "—", fixed[0]["why"], "—"
    test = row.get("test") or {}
    if "failed" in test:
        return str(test["seeds"]), f"{test['failed']} of {test['seeds']} failed", "—"
    return "—", "—", "—"


def render_headline(results_dir: Path, scale: str) -> str:
    """The claims with their numbers and verdicts, for the README (the full evidence is on the results page)."""
    rows = evaluate_claims(results_dir, scale)
    counts = verdict_counts(rows)
    older = [v for v in RULES if v != CURRENT]
    lines = [f"**The paper's claims at scale '{scale}': {counts}** ({rules_line(CURRENT)}). Each version of the "
             f"rules was fixed before the runs of its own date; records made earlier were re-judged by it, and "
             f"every version's verdicts stay computable (`lnrepro claims --rules {older[-1]}`, `--changed`).", "",
             "| claim | paper | seeds per cell | difference in the claim's direction | p | verdict |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        n, diff, p = _numbers(r)
        lines.append(f"| {r['claim']} | {r['source']} | {n} | {escape(diff)} | {p} | {r['verdict']} |")
    return "\n".join(lines) + "\n"


def render_regime(results_dir: Path, scale: str = "mini") -> str:
    """Per task: the regime its recipes train at `scale` today, and where calibration v2 stands (the baseline runs
    recorded of its grid's, their training time and machines, and the choice, the reason the task is not
    informative, or what the decision waits for), from the v2 specs and the collected records."""
    lines = []
    for task in CALIBRATION_TASKS:
        spec = calibration.load_spec(recipes_dir() / "calibration" / "v2" / f"{task}.yaml")
        if spec.scale != scale:  # calibrated at another scale: nothing to say at this one
            continue
        o = resolve(calibration.recipe_path(spec, spec.baselines[0]), scale).recipe.optim
        factor = f", tokens x{o.gpus_per_update}" if o.gpus_per_update > 1 else ""
        now = f"warmup {o.warmup_updates:,}, lr {o.lr:g}{factor}, {o.max_updates:,} updates"
        out_dir = Path(results_dir) / scale / "calibration" / "v2" / task
        records = [read_json(p) for p in sorted(out_dir.glob("*.json")) if p.name != "choice.json"]
        baseline = sum(r.get("recipe_name") in spec.baselines for r in records)
        runs = f"{baseline} of {len(spec.settings()) * len(spec.baselines)} baseline runs"
        if len(records) > baseline:
            runs += f", {len(records) - baseline} of {spec.deep_pre_ln}"
        seconds: dict[str, float] = {}  # training time by machine, longest first: a CPU's hours beside a GPU's minutes
        for r in records:
            machine = where(r.get("hardware") or {})
            seconds[machine] = seconds.get(machine, 0.0) + r.get("duration_s", 0)
        for machine, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
            runs += f"; {s / 3600:.1f} h" if s >= 360 else f"; {s / 60:.0f} min"
            runs += f" on {machine}"
        outcome = calibration_v2_1.outcome(spec, calibration_v2_1.decision(spec, out_dir, results_dir))
        lines.append(f"| {task} | {now} | {spec.max_updates:,} | {escape(runs)} | {escape(outcome)} |")
    if not lines:
        return ""
    return "\n".join(["| task | regime its recipes train | v2 cap | v2 runs recorded, training time | v2 outcome |",
                      "|---|---|---|---|---|", *lines]) + "\n"


def render_results_page(results_dir: Path, scale: str) -> str:
    results_dir = Path(results_dir)
    out = [f"# Results at scale '{scale}'", "",
           f"Generated from `results/` by `lnrepro report --scale {scale}`; never edited by hand. How the runs are "
           "judged: [reduced-scale.md](reduced-scale.md).", "", "## Findings by task", "",
           "Each task's claims by verdict, the test that decided each, and the runs its own verdict still needs "
           f"({SEEDS_COMPARED} seeds a cell, more where a comparison is inconclusive for want of them) with the wall "
           "time they take on the fastest GPU and CPU that recorded a pace of them (the claims' full evidence and the "
           "runs' commands follow below):", "", render_findings(results_dir, scale).strip(), "",
           "## Claims", "",
           render_claims(results_dir, scale, "markdown").strip(), ""]
    versions = list(RULES)[:list(RULES).index(CURRENT) + 1]
    for old, new in reversed(list(zip(versions, versions[1:]))):
        out += [render_changed(results_dir, scale, old, new).strip(), ""]
    regime = render_regime(results_dir, scale).strip()
    if regime:
        out += ["## Regime", "", "The regime each task's recipes train, and where calibration v2 stands "
                "([reduced-scale.md](reduced-scale.md) states its rule):", "", regime, ""]
    out += ["## Tables", ""]
    for number in sorted(SPECS):
        out += [render_table(number, scale, "markdown", results_dir).strip(), ""]
    out += [render_table(8, scale, "markdown", results_dir).strip(), "", "## Figures", ""]
    for name, caption, command in FIGURES:
        path = results_dir / "figures" / name.format(scale=scale)
        if path.is_file():
            out += [f"{caption} (`{command.format(scale=scale)}`):", "", f"![{caption}]({_link(path, results_dir)})", ""]
    for task in CALIBRATION_TASKS:
        for folder, command in ((f"v2/{task}", f"lnrepro calibrate {task}"),
                                (task, f"lnrepro calibrate {task} --rules v1")):
            curves = results_dir / scale / "calibration" / folder / "curves.png"
            if curves.is_file():
                out += [f"Calibration {'v2' if folder.startswith('v2') else 'v1'} of the {task} regime "
                        f"(`{command} --decide-only`):", "",
                        f"![{task} calibration]({_link(curves, results_dir)})", ""]
    out += ["## Runs", "",
            "Training is the training wall time, Evaluation the evaluation's (with its machine where that was "
            "another), Stretches the sessions the training took (a run resumed from its checkpoint; the record's "
            "`segments` say where each ran), Commit the commit of its code (each, where its stretches ran different "
            "ones; -dirty: from a work tree with uncommitted changes, so that commit's code only in part), Model code "
            "the version of the layers' code it trained (a claim judges the seeds of one version together). Each "
            "record names its recipe and hash, commit, seed, hardware, start and duration, and keeps its training log "
            "beside it.", "",
            render_runs(results_dir, scale, "markdown").strip(), "", "## Still to run", "",
            render_missing(results_dir, scale, "markdown").strip(), ""]
    return "\n".join(out)


def _link(path: Path, results_dir: Path) -> str:
    """A file under results/ as a link from docs/, its sibling."""
    return "../results/" + path.relative_to(results_dir).as_posix()


README_BLOCKS = ("claims", "regime", "missing")  # the README's generated blocks, each between its two markers


def block_markers(name: str) -> tuple[str, str]:
    return f"<!-- the {name} block: written by `lnrepro report` -->\n", f"\n<!-- end of the {name} block -->"


def readme_with_blocks(readme: str, results_dir: Path) -> str:
    """The README with each generated block it holds made anew from the `mini` records."""
    render = {"claims": render_headline, "regime": render_regime, "missing": render_still_to_run}
    for name in README_BLOCKS:
        start, end = block_markers(name)
        if start in readme:
            i, j = readme.index(start) + len(start), readme.index(end)
            readme = readme[:i] + render[name](results_dir, "mini").strip() + readme[j:]
    return readme


def report(results_dir: Path, scale: str, docs_dir: Path, commands) -> None:
    """`lnrepro report`: the pages written, and the README's blocks where they show the committed records (written
    only from results/ into docs/ beside it); `commands`: the command line (a click group), whose help is a page."""
    committed = Path(results_dir).resolve() == Path("results").resolve() and \
        Path(docs_dir).resolve() == Path("docs").resolve()
    if scale == "mini" and not committed:
        console.print(f"README.md left as it is: its blocks show the committed records, not {results_dir}",
                      markup=False, highlight=False)
    for path in write_pages(results_dir, scale, docs_dir, Path("README.md") if scale == "mini" and committed else None,
                            help_page(commands)):
        console.print(f"wrote {path}", highlight=False, markup=False)


def help_page(commands, width: int = 100) -> str:
    """Every command's --help, as `lnrepro COMMAND --help` prints it at `width` columns; `commands`: the command
    line as a click group (this module does not import the command line, which imports it)."""
    import click
    out = ["# The command line", "", "Generated from the commands themselves by `lnrepro report`; never edited by hand.",
           ""]
    with click.Context(commands, info_name="lnrepro", terminal_width=width, max_content_width=width) as ctx:
        out += ["```", commands.get_help(ctx), "```", ""]
        for name in commands.list_commands(ctx):
            command = commands.get_command(ctx, name)
            with click.Context(command, info_name=f"lnrepro {name}", parent=None, terminal_width=width,
                               max_content_width=width) as sub:
                out += [f"## lnrepro {name}", "", "```", command.get_help(sub), "```", ""]
    return "\n".join(out)


def write_pages(results_dir: Path, scale: str, docs_dir: Path, readme: Path | None = None,
                cli_page: str | None = None) -> list[Path]:
    """The generated pages (`cli_page`: the command line's help, help_page), and the README's generated blocks where
    `readme` holds them."""
    pages = {Path(docs_dir) / f"results-{scale}.md": render_results_page(results_dir, scale),
             **({Path(docs_dir) / "cli.md": cli_page} if cli_page is not None else {})}
    if readme is not None and readme.is_file():
        pages[readme] = readme_with_blocks(readme.read_text(encoding="utf-8"), results_dir)
    for path, text in pages.items():
        atomic_write_text(path, text)
    return list(pages)
