"""The `lnrepro` command line: each command declares its options and hands them to a function of the library; a
refusal anywhere is one line naming the option, file or value at fault, exit 2."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from repro import __version__
from repro.calibration import TASKS as CALIBRATION_TASKS
from repro.config import RecipeError
from repro.data.prepare import DATASETS
from repro.options import check_folder, check_results, check_scale, default_root, set_threads
from repro.progress import console

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Reproduce 'On Layer Normalizations and Residual Connections in Transformers' "
                       "(Takase et al. 2022): prepare data, train a table cell, evaluate it, compare with the paper.")

MAX_THREADS = 4 * (os.cpu_count() or 1)  # more threads than that only slows a run down

# options several commands take, declared once
Root = Annotated[Optional[Path], typer.Option("--root", help="Prepared corpora (default data/ or $LNREPRO_DATA).")]
Records = Annotated[Path, typer.Option("--results", help="Folder of run records.")]
RecordsOut = Annotated[Path, typer.Option("--results", help="Where run records are written.")]
Threads = Annotated[Optional[int], typer.Option("--threads", min=1, max=MAX_THREADS,
                                                help="CPU threads (default $LNREPRO_THREADS or all cores).")]
JobThreads = Annotated[Optional[int], typer.Option("--threads", min=1, max=MAX_THREADS,
                                                   help="CPU threads per run (default: cores / jobs).")]
Trust = Annotated[bool, typer.Option("--trust-checkpoints", help=(
    "Load checkpoints that have no .sha256 beside them (refused otherwise: their bytes cannot be checked)."))]
Replace = Annotated[bool, typer.Option("--replace-record", help=(
    "Replace the finished record of another run that holds this run's slot (it is never replaced otherwise)."))]
TokensPerGpu = Annotated[Optional[int], typer.Option("--tokens-per-gpu", help=(
    "Tokens each GPU takes per forward, a multiple of the recipe's data.max_tokens: fewer, larger forwards make the "
    "same update (the same batches); the record says which was used."))]
CUDA_GRAPHS_HELP = ("On a GPU: replay each batch's forward and backward as a CUDA graph, the same arithmetic with "
                    "far fewer kernel launches (MT and summarisation, one process, fp32 or bf16).")
CudaGraphs = Annotated[bool, typer.Option("--cuda-graphs", help=CUDA_GRAPHS_HELP)]


def fail(message: str, code: int = 2):
    from rich.text import Text
    console.print(Text.assemble(("error:", "red"), " ", str(message)), soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def one_line_errors():
    """The library's refusals (a ValueError or one of its own errors naming what is at fault) as the command's
    one-line error. OSError: a path argument that is not usable (a file where a folder is wanted, no permission),
    whose message names the path."""
    from repro.data.text import PrepareError
    from repro.eval.evaluate import EvaluateError
    from repro.train.checkpoint import CheckpointError
    try:
        yield
    except (RecipeError, PrepareError, EvaluateError, CheckpointError, OSError, ValueError) as e:
        fail(str(e))


def _version(value: bool):
    if value:
        print(f"lnrepro {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Show the version and exit.")):
    pass


@app.command()
def prepare(dataset: str = typer.Argument(..., help=f"One of: {', '.join(DATASETS)}."),
            root: Path = typer.Option(None, "--root", help="Where prepared corpora live (default data/ or $LNREPRO_DATA)."),
            source: Optional[Path] = typer.Option(None, "--source", help="Folder with the raw archives or files, instead of downloading."),
            vocab_size: Optional[int] = typer.Option(None, "--vocab-size", min=100, max=1_000_000, help="SentencePiece vocabulary size (default: the paper's for the dataset).")):
    """Download (or read from --source), preprocess and binarize a corpus.

    Example: lnrepro prepare multi30k --source ../shared/data/multi30k
    """
    from repro.data.prepare import prepare as prepare_corpus
    with one_line_errors():
        root = root or default_root()
        check_folder(root, "--root", writable=True)
        console.print(prepare_corpus(dataset, root, source, vocab_size))


@app.command()
def train(recipe: Path = typer.Argument(..., help="A recipe YAML file, e.g. recipes/18L-18L-b2t.yaml."),
          scale: str = typer.Option("paper", "--scale", help="paper, mini or tiny (the README's scale ladder)."),
          run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Default: runs/<recipe>-<scale>-s<seed> (with --set: runs/<recipe>-<scale>-<hash>-s<seed>)."),
          set_: List[str] = typer.Option([], "--set", help="Override a recipe key, e.g. --set optim.lr=5e-4 (repeatable)."),
          seed: Optional[int] = typer.Option(None, "--seed", help="Seed (train.seed); another seed is the same recipe, not an override."),
          seeds: Optional[str] = typer.Option(None, "--seeds", help=(
              "Train these seeds together as one batched model (repro/train/group.py), e.g. 1-8 or 1,3,5; each "
              "writes its own run folder (under --run-dir, if given) and record.")),
          resume: bool = typer.Option(False, "--resume", help="Continue from the run directory's last checkpoint."),
          overwrite: bool = typer.Option(False, "--overwrite", help="Replace the run the run directory already holds."),
          allow_recipe_change: bool = typer.Option(False, "--allow-recipe-change",
                                                   help="With --resume: continue under a recipe that differs from the checkpoint's."),
          print_config: bool = typer.Option(False, "--print-config", help="Print the resolved recipe and exit."),
          root: Root = None, results: RecordsOut = Path("results"), threads: Threads = None,
          cuda_graphs: CudaGraphs = False, tokens_per_gpu: TokensPerGpu = None,
          precision: Optional[str] = typer.Option(None, "--precision", help=(
              "fp32, bf16 or fp16 (with dynamic loss scaling): train.precision; another than the recipe's is an "
              "override, so its records are kept apart from the recipe's own.")),
          tensorboard: bool = typer.Option(False, "--tensorboard", help="Also write TensorBoard event files to RUN_DIR/tb (pip install -e '.[tb]')."),
          replace_record: Replace = False, trust_checkpoints: Trust = False):
    """Train one table cell. Under torchrun, every process runs this command.

    Example: lnrepro train recipes/18L-18L-b2t.yaml --scale mini
    """
    from repro import training_run as tr
    options = tr.TrainOptions(scale, set_, run_dir, resume, overwrite, allow_recipe_change, root, results, threads,
                              cuda_graphs, tokens_per_gpu, precision, tensorboard, replace_record, trust_checkpoints)
    with one_line_errors():
        if seeds is not None:
            code = tr.train_seeds(recipe, tr.seed_list(seeds, seed, print_config), options)
        else:
            code = tr.train_one(recipe, seed, print_config, options)
    if code:
        raise typer.Exit(code)


@app.command()
def evaluate(run: Path = typer.Argument(..., help="A run directory written by `lnrepro train`."),
             root: Root = None, results: RecordsOut = Path("results"), threads: Threads = None,
             replace_record: Replace = False, trust_checkpoints: Trust = False):
    """Average the last checkpoints, decode/score every test split, write metrics.json and the run's record.

    Example: lnrepro evaluate runs/6L-6L-b2t-mini-s1
    """
    from repro.training_run import evaluate as evaluate_run
    with one_line_errors():
        path = evaluate_run(run, root, results, threads, replace_record, trust_checkpoints)
    console.print(f"record {path}")


@app.command("score-fairseq")
def score_fairseq(checkpoint: Path = typer.Argument(..., help="A fairseq Transformer checkpoint (fairseq 0.9-0.12, the authors' fork's included)."),
                  dictionary: Path = typer.Option(..., "--dict", help="Its dictionary (dict.txt, shared by source and target)."),
                  variant: Optional[str] = typer.Option(None, "--variant", help="lnrepro's variant to read it as (default: pre_ln or post_ln from its arguments, b2t where a bottom-to-top argument is on)."),
                  source: Optional[Path] = typer.Option(None, "--source", help="Source sentences, one per line (raw text)."),
                  reference: Optional[Path] = typer.Option(None, "--reference", help="References, one per line, for SacreBLEU."),
                  test_set: Optional[str] = typer.Option(None, "--test-set", help="A SacreBLEU test set instead (downloaded by SacreBLEU), e.g. wmt14/full."),
                  langpair: str = typer.Option("en-de", "--langpair", help="Source and target language."),
                  bpe_codes: Optional[Path] = typer.Option(None, "--bpe-codes", help="subword-nmt BPE codes of the checkpoint's training data."),
                  tokenizer: str = typer.Option("moses", "--tokenizer", help="moses (sacremoses, as fairseq's WMT preparation) or none."),
                  beam: int = typer.Option(4, "--beam", min=1, help="Beam size."),
                  lenpen: float = typer.Option(1.0, "--lenpen", help="Length penalty (the authors: 0.6 on newstest2014, 1.0 elsewhere)."),
                  max_len_a: float = typer.Option(0.0, "--max-len-a", help="Output length limit: a * source tokens + b (fairseq's generate.py: 0, 200)."),
                  max_len_b: int = typer.Option(200, "--max-len-b", min=1, max=100000, help="See --max-len-a."),
                  out: Optional[Path] = typer.Option(None, "--out", help="Write the detokenised hypotheses here."),
                  threads: Threads = None):
    """Translate with a fairseq checkpoint in lnrepro's model and beam search, and score it with SacreBLEU.

    Example: lnrepro score-fairseq b2t_layer18_ave10.pt --dict dict.en.txt --bpe-codes code --test-set wmt14/full --lenpen 0.6 --variant b2t
    """
    from repro.eval.fairseq_import import FairseqImportError
    from repro.eval.score_fairseq import score
    try:
        set_threads(threads)
        line = score(checkpoint, dictionary, variant, source, reference, test_set, langpair, bpe_codes, tokenizer,
                     beam, lenpen, (max_len_a, max_len_b), out)
    except (FairseqImportError, ValueError, RecipeError, OSError) as e:
        fail(str(e))
    if line:
        print(line)


@app.command()
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


@app.command()
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


@app.command()
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


@app.command()
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


@app.command()
def claims(scale: str = typer.Option("mini", "--scale", help="Whose records to judge."),
           fmt: str = typer.Option("text", "--format", help="text, markdown or json."),
           rules: str = typer.Option(None, "--rules", help="Which dated version of the judging rules (v1, v2, v3; "
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


@app.command()
def report(scale: str = typer.Option("mini", "--scale", help="Whose records the results page shows."),
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
        write_report(results, scale, docs, typer.main.get_command(app))


@app.command()
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


@app.command()
def runs(scale: str = typer.Option("mini", "--scale", help="Whose records to list."),
         fmt: str = typer.Option("text", "--format", help="text, markdown, csv or json."),
         missing: bool = typer.Option(False, "--missing", help="List the runs still to make instead: the seeds each "
                                      "cell needs with no record (five for Table 1 and the cells claims compare, "
                                      "more where a claim's power asks; three elsewhere), and the hours of training "
                                      "they need on each machine the records trained on."),
         results: Records = Path("results")):
    """List the runs behind the tables: status, updates, training and evaluation time, machine, start, commit.

    Example: lnrepro runs --scale mini --format markdown; lnrepro runs --scale mini --missing
    """
    from repro.run_list import render_missing, render_runs
    with one_line_errors():
        check_scale(scale)
        check_results(results)
        out = render_missing(results, scale, fmt) if missing else render_runs(results, scale, fmt)
    print(out, end="")


@app.command()
def reproduce(table_number: int = typer.Argument(..., metavar="TABLE", help="Table 1-6, 9, 10 or 11 (the extension)."),
              scale: str = typer.Option("paper", "--scale", help="paper, mini or tiny."),
              seeds: int = typer.Option(1, "--seeds", help="Seeds 1..N per cell."),
              jobs: int = typer.Option(2, "--jobs", help="Runs at once (local launcher)."),
              threads: JobThreads = None,
              launcher: str = typer.Option("local", "--launcher", help="local, slurm, or submitit-local (the SLURM path on this machine)."),
              plan_only: bool = typer.Option(False, "--plan", help="Print the runs, what is done, partial or missing; run nothing."),
              cells: List[str] = typer.Option([], "--cells", help="GROUP or GROUP:METHOD, e.g. 6L-6L or 18L-18L:b2t (repeatable)."),
              slurm_config: Optional[Path] = typer.Option(None, "--slurm-config", help="YAML with partition, account, qos, constraint, time, gpus, cpus."),
              partition: Optional[str] = typer.Option(None, "--partition", help="SLURM partition."),
              account: Optional[str] = typer.Option(None, "--account", help="SLURM account."),
              time_min: Optional[int] = typer.Option(None, "--time", help="SLURM time limit per run, minutes."),
              gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs per SLURM job (torchrun inside when > 1)."),
              runs: Path = typer.Option(Path("runs"), "--runs", help="Where run directories live."),
              root: Root = None, results: Records = Path("results"),
              cuda_graphs: CudaGraphs = False, tokens_per_gpu: TokensPerGpu = None,
              group: Optional[bool] = typer.Option(None, "--group/--no-group", help=(
                  "Train each cell's missing seeds as one batched model (train --seeds), or one process per run. "
                  "Default: grouped on a GPU, where it is faster; not on a CPU, where it is not."))):
    """Run every cell of a table (train, evaluate; finished runs skipped, interrupted ones resumed), then render it.

    Example: lnrepro reproduce 1 --scale mini --seeds 3 --jobs 16
    """
    from repro import reproduce_run
    slurm = {"config": slurm_config, "partition": partition, "account": account, "time": time_min, "gpus": gpus}
    with one_line_errors():
        check_scale(scale)
        reproduce_run.run(table_number, scale, seeds, cells, jobs, threads, launcher, plan_only, slurm, runs,
                          root or default_root(), results, cuda_graphs, tokens_per_gpu, group)


@app.command()
def calibrate(task: str = typer.Argument(..., help=f"One of: {', '.join(CALIBRATION_TASKS)} (spec: recipes/calibration/v2/TASK.yaml; v1's one folder up)."),
              jobs: Optional[int] = typer.Option(None, "--jobs", help="Runs at once (default: one per core, each on one thread)."),
              threads: JobThreads = None,
              decide_only: bool = typer.Option(False, "--decide-only", help="Apply the rule to the committed records; run nothing."),
              train_grid: bool = typer.Option(False, "--train", help="Train the grid's runs even where committed records already decide."),
              runs: Path = typer.Option(Path("runs/calibration"), "--runs", help="Where the calibration runs train."),
              root: Root = None, results: Records = Path("results"),
              rules: str = typer.Option("v2", "--rules", help="v2 (2026-11-29: learning rate, warmup and tokens per update, minimax regret; recipes/calibration/v2/) or v1 (warmup, lowest mean)."),
              group: Optional[bool] = typer.Option(None, "--group/--no-group", help="v2: train a baseline's learning rates and warmups at one tokens factor as one batched model (default: on a GPU)."),
              tokens_factor: Optional[int] = typer.Option(None, "--tokens-factor", help="v2: train only the grid's settings at this tokens factor (a grid split across machines); the decision reads the whole grid."),
              setting: Optional[str] = typer.Option(None, "--setting", help="v2: train only this grid setting's baseline runs, named as their records are (w1000-lr0.0005-x4; x1 has no suffix); the decision reads the whole grid."),
              cuda_graphs: bool = typer.Option(False, "--cuda-graphs", help="v2, with --no-group: " + CUDA_GRAPHS_HELP),
              one_forward: bool = typer.Option(False, "--one-forward", help="v2, with --no-group: a tokens-xK run makes each update's K batches in one forward (train --tokens-per-gpu), the same update with the launches of one batch."),
              train_group: Optional[str] = typer.Option(None, "--train-group", hidden=True, help="v2: train BASELINE:K's unfinished settings as one group (the grouped grid's jobs).")):
    """Choose a task's mini regime on the two baselines alone: run the spec's grid, record it, apply the rule.

    Example: lnrepro calibrate mt
    """
    from repro import calibration_run
    with one_line_errors():
        calibration_run.calibrate(task, rules, jobs, threads, decide_only, train_grid, runs, root or default_root(),
                                  results, group, train_group, tokens_factor, cuda_graphs, one_forward, setting)


@app.command()
def queue(scale: str = typer.Option("mini", "--scale", help="Whose records decide what is still needed."),
          hours: Optional[float] = typer.Option(None, "--hours", min=0.0, help="Show (or with --run, train) only the "
                                                "sets that fit this many priced hours, in order."),
          limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N queued sets."),
          fmt: str = typer.Option("text", "--format", help="text or json."),
          run: bool = typer.Option(False, "--run", help="Train the queued runs in order, in lanes that resume."),
          jobs: Optional[int] = typer.Option(None, "--jobs", help="Runs at once (default: one per core, one thread "
                                             "each; one on a GPU)."),
          runs: Optional[Path] = typer.Option(None, "--runs", help="Where the runs train: outside the checkout, so a "
                                              "fresh clone resumes them (default $LNREPRO_RUNS or ~/lnrepro-runs)."),
          root: Root = None, results: Records = Path("results")):
    """The runs the claims still need, as decisive sets ordered by claims decided per priced hour; --run trains
    them in that order.

    Example: lnrepro queue --hours 10
    """
    import torch

    from repro import queue as evidence_queue
    on_gpu = torch.cuda.is_available()
    with one_line_errors():
        check_scale(scale)
        check_results(results)
        if fmt not in ("text", "json"):
            raise ValueError(f"--format {fmt!r}: expected text or json")
        sets = evidence_queue.build(results, scale, on_gpu)
        print(evidence_queue.render(sets, hours, fmt, limit), end="")
        if run:
            evidence_queue.run(sets, hours, limit, jobs, (runs or evidence_queue.default_runs()).expanduser(),
                               root or default_root(), results, on_gpu, scale)


def entry():
    """The `lnrepro` command: a wrong argument or option is one line naming it, exit 2 (click's default is three)."""
    import faulthandler
    import sys

    from rich.text import Text
    try:  # a crash in native code (a segfault, glibc's abort) prints the Python stack it hit
        faulthandler.enable()
    except (RuntimeError, ValueError):  # no stderr to print to (closed: `2>&-`); io.UnsupportedOperation too
        pass
    usage_error = typer.BadParameter.__mro__[1]  # the UsageError of the click that typer carries
    try:
        code = app(standalone_mode=False)
    except usage_error as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `lnrepro` alone: the help, as before
            print(e.format_message())
            sys.exit(2)
        where = e.ctx.command_path if getattr(e, "ctx", None) is not None else "lnrepro"
        console.print(Text.assemble(("error:", "red"), f" {where}: {e.format_message()} (see {where} --help)"),
                      soft_wrap=True)
        sys.exit(2)
    except typer.Abort:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    entry()
