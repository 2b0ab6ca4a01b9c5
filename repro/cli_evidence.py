"""The commands that read the evidence: the paper's tables and figures beside ours, the claims' verdicts, the
generated pages, the runs made and missing, the recipes, the trivial references. Each declares its options and
hands them to a function of the library; repro/cli.py registers them."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from repro.cli_options import Records, Root, Threads, fail, one_line_errors
from repro.config import RecipeError
from repro.options import check_folder, check_results, check_scale, default_root, set_threads
from repro.progress import console


def table(number: int = typer.Argument(..., help="Table number: the paper's 1 to 10, or 11, the extension (newer placements)."),
          scale: str = typer.Option("paper", "--scale", help="Which scale's runs fill the 'ours' column."),
          fmt: str = typer.Option("text", "--format", help="text, markdown, latex, csv or json."),
          paper_version: str = typer.Option("en", "--paper", help="en (arXiv, default) or ja (NLP2022 workshop)."),
          results: Records = Path("results"),
          sets: list[str] = typer.Option([], "--set", help="An ablation: also show ours from the runs trained with "
                                         "this override (train RECIPE --set KEY=VALUE); repeatable.")):
    """Paper values beside ours, with the difference, for one table.

    Example: lnrepro table 1 --scale mini --format markdown
    Example: lnrepro table 1 --scale tiny --set optim.lr=0.0005
    """
    from repro.tables.render import render_table
    try:
        check_scale(scale)
        if number not in (7,):  # Table 7 is read from the recipes alone
            check_results(results)
        out = render_table(number, scale=scale, fmt=fmt, results_dir=results, paper_version=paper_version,
                           sets=sets or None)
    except (KeyError, ValueError, RecipeError) as e:
        fail(str(e).strip("'\""))
    if out is not None:
        print(out, end="" if out.endswith("\n") else "\n")


def figure(number: int = typer.Argument(..., help="Figure number: 3, 4 and 7 need no data or runs."),
           out: Optional[Path] = typer.Option(None, "--out", help="PNG path (default figures/figure<N>.png)."),
           json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the plotted numbers as JSON."),
           layers: int = typer.Option(18, "--layers", min=1, max=200, help="Figures 3/4/7: encoder and decoder depth."),
           d_model: int = typer.Option(512, "--d-model", min=8, max=8192, help="Figures 3/4/7: model width."),
           updates: int = typer.Option(0, "--updates", min=0, max=1_000_000, help="Figures 3/4/7: train this many updates first."),
           root: Path = typer.Option(None, "--root", help="Prepared corpora: a batch of wmt16_ende is used when present."),
           scale: str = typer.Option("mini", "--scale", help="Figures from runs: whose records to plot."),
           results: Records = Path("results")):
    """Draw one of the paper's figures as a PNG.

    Example: lnrepro figure 3 --out fig3.png --json fig3.json
    """
    from repro.figures import draw
    with one_line_errors():
        check_scale(scale)
        if d_model % 8:
            raise ValueError(f"--d-model {d_model}: must be a multiple of the 8 attention heads")
        out = out or Path("figures") / f"figure{number}.png"
        draw(number, out, json_path, layers, d_model, updates, root or default_root(), results, scale)
    console.print(f"wrote {out}")


def curves(run_dirs: List[Path] = typer.Argument(..., help="Run directories (or records' .log.jsonl files)."),
           out: Path = typer.Option(Path("figures/curves.png"), "--out", help="PNG path."),
           json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the plotted numbers as JSON.")):
    """Draw the training loss and validation NLL of any runs into one PNG, from their logs.

    Example: lnrepro curves runs/6L-6L-b2t-mini-s1 runs/6L-6L-pre_ln-mini-s1 --out curves.png
    """
    from repro.figures.curves import draw_curves
    with one_line_errors():
        draw_curves(run_dirs, out, json_path)
    console.print(f"wrote {out}", markup=False, highlight=False)


def recipes(folder: Path = typer.Argument(Path("recipes"), help="Folder of recipes."),
            check: bool = typer.Option(False, "--check", help="Load every recipe at every scale; exit 2 on the first problem.")):
    """List every recipe (task, variant, depths); with --check, validate them all.

    Example: lnrepro recipes --check
    """
    from repro.recipe_list import list_recipes, recipe_files
    with one_line_errors():
        print(list_recipes(folder, check), end="")
    if check:
        console.print(f"all {len(recipe_files(folder))} recipes load at every scale they define", style="green")


def claims(scale: str = typer.Option("mini", "--scale", help="Whose records to judge."),
           fmt: str = typer.Option("text", "--format", help="text, markdown or json."),
           rules: str = typer.Option(None, "--rules", help="Which dated version of the judging rules (v1, v2, v3, v4; "
                                     "default the current one)."),
           changed: bool = typer.Option(False, "--changed", help="List the verdicts that changed from the previous "
                                        "version of the rules to --rules instead."),
           results: Records = Path("results")):
    """Judge the paper's findings against results/: reproduced, not reproduced, inconclusive or not run.

    Example: lnrepro claims --scale mini --format markdown
    """
    from repro.verdicts import render_verdicts
    with one_line_errors():
        check_scale(scale)
        check_results(results)
        out = render_verdicts(results, scale, fmt, rules, changed)
    if out is not None:
        print(out, end="")


def report(ctx: typer.Context,
           scale: str = typer.Option("mini", "--scale", help="Whose records the results page shows."),
           docs: Path = typer.Option(Path("docs"), "--docs", help="Where the pages go."),
           results: Records = Path("results")):
    """Write the generated pages: docs/results-SCALE.md (the findings by task, tables, claims with their
    statistics, figures, runs, what is still to run) from the records, docs/cli.md from the commands' own help, and the README's generated blocks
    (the claims, the regime).

    Example: lnrepro report --scale mini
    """
    from repro.report import report as write_report
    with one_line_errors():
        check_scale(scale)
        check_results(results)
        check_folder(docs, "--docs")
        # the command line itself, as click runs it: its help is a page (this module is part of it, never imports it)
        write_report(results, scale, docs, ctx.find_root().command)


def references(recipe: Path = typer.Argument(..., help="A recipe whose corpus (at --scale) to compute them for."),
               scale: str = typer.Option("mini", "--scale", help="paper, mini or tiny."),
               root: Root = None, results: Records = Path("results"), threads: Threads = None):
    """Compute a prepared corpus's trivial references (unigram NLL, best constant output), which the judging
    rules fail a run against when it does not beat them; writes results/references/<corpus>.json.

    Example: lnrepro references recipes/6L-6L-b2t.yaml --scale mini --root data
    """
    from repro.config import resolve
    from repro.references import write_references
    with one_line_errors():
        check_scale(scale)
        set_threads(threads)
        r = resolve(recipe, scale).recipe
        path = write_references((root or default_root()) / r.data.corpus, r.task, r.data.valid_split,
                                r.data.test_splits, results)
    console.print(f"wrote {path}")


def runs(scale: str = typer.Option("mini", "--scale", help="Whose records to list."),
         fmt: str = typer.Option("text", "--format", help="text, markdown, csv or json."),
         missing: bool = typer.Option(False, "--missing", help="List the runs still to make instead: the seeds each "
                                      "cell needs with no record (five for Table 1 and the cells claims compare, "
                                      "more where a claim's power asks; three elsewhere), and the hours of training "
                                      "they need on each machine the records trained on."),
         check: bool = typer.Option(False, "--check", help="Instead, check each record's provenance: every stretch "
                                    "from a clean commit in this checkout's history, its training log beside it; "
                                    "exit 1 naming each record short of it."),
         results: Records = Path("results")):
    """List the runs behind the tables: status, updates, training and evaluation time, machine, start, commit.

    Example: lnrepro runs --scale mini --format markdown; lnrepro runs --scale mini --missing
    """
    from repro.provenance import in_history
    from repro.run_list import provenance_gaps, render_missing, render_runs
    with one_line_errors():
        check_scale(scale)
        check_results(results)
        if check:
            gaps = provenance_gaps(results, scale)
            for line in gaps:
                print(line)
            if gaps:
                raise typer.Exit(1)
            history = "of this checkout's history" if in_history("HEAD") else "(no git history here to find them in)"
            print(f"every record of scale {scale!r} under {results} names clean commits {history} and keeps its "
                  "training log")
            return
        out = render_missing(results, scale, fmt) if missing else render_runs(results, scale, fmt)
    print(out, end="")
