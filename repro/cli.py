"""The `lnrepro` command line: each subcommand is a thin function over the library."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import List, Optional

import typer

from repro import __version__
from repro.calibration import TASKS as CALIBRATION_TASKS
from repro.config import RecipeError
from repro.progress import console

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Reproduce 'On Layer Normalizations and Residual Connections in Transformers' "
                       "(Takase et al. 2022): prepare data, train a table cell, evaluate it, compare with the paper.")

MAX_THREADS = 4 * (os.cpu_count() or 1)  # more threads than that only slows a run down
DATASETS = ("wmt", "wmt-sample", "multi30k", "gigaword", "wikitext103", "librispeech", "speech-mini", "tiny")


def default_root() -> Path:
    return Path(os.environ.get("LNREPRO_DATA", "data"))


def fail(message: str, code: int = 2):
    from rich.text import Text
    console.print(Text.assemble(("error:", "red"), " ", str(message)), soft_wrap=True)
    raise typer.Exit(code)


def check_folder(path: Path, option: str, writable: bool = False) -> None:
    """A folder option must name a folder (or nothing yet), and one a command writes into must be writable: fail
    before any work, not after it."""
    for parent in [path, *path.parents]:
        if parent.exists():
            if not parent.is_dir():
                fail(f"{option} {path}: {parent} is a file, not a folder")
            if writable and not os.access(parent, os.W_OK):
                fail(f"{option} {path}: {parent} is not writable")
            return


def default_run_dir(parent: Path, resolved) -> Path:
    """A run's folder unless --run-dir names one: its recipe, scale and seed, and with --set the hash of the
    overrides' recipe, so that an ablation never meets the recipe's own run."""
    tag = f"-{resolved.hash()}" if resolved.overrides else ""
    return parent / f"{resolved.name.replace('/', '-')}-{resolved.scale}{tag}-s{resolved.recipe.train.seed}"


def check_results(results: Path) -> None:
    """A command that reads records needs their folder: a missing one would print tables of "not run"."""
    if not results.is_dir():
        fail(f"--results {results}: no such folder of run records")


def check_scale(scale: str) -> None:
    """--scale must name a scale of the ladder: an unknown one would read no records and print empty tables."""
    from repro.config import SCALES
    if scale not in SCALES:
        fail(f"--scale {scale!r}: expected one of {', '.join(SCALES)}")


def set_threads(threads: int | None) -> None:
    """--threads, else $LNREPRO_THREADS (set by `calibrate`/`reproduce` for their jobs), else torch's default."""
    threads = threads or int(os.environ.get("LNREPRO_THREADS", "0") or 0)
    if threads < 0:
        fail(f"--threads {threads}: expected a positive number")
    if threads:
        import torch
        torch.set_num_threads(threads)


def _version(value: bool):
    if value:
        print(f"lnrepro {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Show the version and exit.")):
    pass


def variant_warms(resolved) -> bool:
    from repro.model.variants import VARIANTS
    return VARIANTS[resolved.recipe.model.variant].warmup


def _known_errors():
    from repro.data.text import PrepareError
    from repro.eval.evaluate import EvaluateError
    from repro.train.checkpoint import CheckpointError
    # OSError: a path argument that is not usable (a file where a folder is wanted, no permission); its
    # message names the path
    return (RecipeError, PrepareError, EvaluateError, CheckpointError, OSError, ValueError)


@app.command()
def prepare(dataset: str = typer.Argument(..., help=f"One of: {', '.join(DATASETS)}."),
            root: Path = typer.Option(None, "--root", help="Where prepared corpora live (default data/ or $LNREPRO_DATA)."),
            source: Optional[Path] = typer.Option(None, "--source", help="Folder with the raw archives or files, instead of downloading."),
            vocab_size: Optional[int] = typer.Option(None, "--vocab-size", min=100, max=1_000_000, help="SentencePiece vocabulary size (default: the paper's for the dataset).")):
    """Download (or read from --source), preprocess and binarize a corpus.

    Example: lnrepro prepare multi30k --source ../shared/data/multi30k
    """
    root = root or default_root()
    check_folder(root, "--root", writable=True)
    if source is not None and not source.exists():
        fail(f"--source {source}: no such folder")
    try:
        if dataset == "wmt":
            from repro.data.wmt import prepare_wmt
            meta = prepare_wmt(root, source, vocab_size or 32000)
        elif dataset == "wmt-sample":
            from repro.data.wmt import prepare_wmt_sample
            meta = prepare_wmt_sample(root, source, vocab_size or 8000)
        elif dataset == "multi30k":
            from repro.data.multi30k import prepare_multi30k
            meta = prepare_multi30k(root, source, vocab_size or 8000)
        elif dataset == "gigaword":
            from repro.data.gigaword import prepare_gigaword
            meta = prepare_gigaword(root, source, vocab_size)
        elif dataset == "wikitext103":
            from repro.data.wikitext import prepare_wikitext103
            meta = prepare_wikitext103(root, source)
        elif dataset == "librispeech":
            from repro.data.librispeech import prepare_librispeech
            meta = prepare_librispeech(root, source, vocab_size or 10000)
        elif dataset == "speech-mini":
            from repro.data.speech_mini import prepare_speech_mini
            meta = prepare_speech_mini(root, source, vocab_size or 1000)
        elif dataset == "tiny":
            from repro.data.tiny import ensure_tiny_corpora
            made = ensure_tiny_corpora(root, source)
            console.print(f"tiny corpora in {root}: {', '.join(made) or 'already prepared'}"
                          + ("" if source else " (tiny_speech needs --source with a LibriSpeech/ folder)"))
            return
        else:
            fail(f"prepare {dataset!r}: unknown dataset (expected one of {', '.join(DATASETS)})")
    except _known_errors() as e:
        fail(str(e))
    console.print(f"prepared {meta['corpus']} in {root / meta['corpus']} (vocabulary {meta['vocab_size']:,})")


TRUST_HELP = "Load checkpoints that have no .sha256 beside them (refused otherwise: their bytes cannot be checked)."
REPLACE_HELP = "Replace the finished record of another run that holds this run's slot (it is never replaced otherwise)."
TOKENS_PER_GPU_HELP = ("Tokens each GPU takes per forward, a multiple of the recipe's data.max_tokens: fewer, larger "
                       "forwards make the same update (the same batches); the record says which was used.")
PRECISION_HELP = ("fp32, bf16 or fp16 (with dynamic loss scaling): train.precision; another than the recipe's is an "
                  "override, so its records are kept apart from the recipe's own.")


def precision_override(recipe: Path, scale: str, precision: str | None) -> list[str]:
    """--precision as the `--set` it is, or nothing where it is the recipe's own precision."""
    if precision is None:
        return []
    from repro.config import resolve
    try:
        own = resolve(recipe, scale).recipe.train.precision
    except RecipeError:
        return []  # the resolve that follows says why
    return [] if precision == own else [f"train.precision={precision}"]


CUDA_GRAPHS_HELP = ("On a GPU: replay each batch's forward and backward as a CUDA graph, the same arithmetic with "
                    "far fewer kernel launches (MT and summarisation, one process, fp32 or bf16).")


GROUP_HELP = ("Train each cell's missing seeds as one batched model (train --seeds), or one process per run. "
              "Default: grouped on a GPU, where it is faster; not on a CPU, where it is not.")
def before_training(threads: int | None, trust_checkpoints: bool, results: Path, root: Path | None,
                    scale: str) -> None:
    """What `train` (one run or `--seeds`) settles before any training: threads, trusted checkpoints, the folders it
    reads and writes, and at scale tiny the generated corpora (a smoke test needs no prepare step)."""
    set_threads(threads)
    if trust_checkpoints:
        from repro.train.checkpoint import TRUST
        os.environ[TRUST] = "1"
    check_folder(results, "--results", writable=True)
    check_folder(root or default_root(), "--root")
    if scale == "tiny":
        from repro.data.tiny import ensure_tiny_corpora
        ensure_tiny_corpora(root or default_root())


SEEDS_HELP = ("Train these seeds together as one batched model (repro/train/group.py), e.g. 1-8 or 1,3,5; each "
              "writes its own run folder (under --run-dir, if given) and record.")


@app.command()
def train(recipe: Path = typer.Argument(..., help="A recipe YAML file, e.g. recipes/18L-18L-b2t.yaml."),
          scale: str = typer.Option("paper", "--scale", help="paper, mini or tiny (the README's scale ladder)."),
          run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Default: runs/<recipe>-<scale>-s<seed> (with --set: runs/<recipe>-<scale>-<hash>-s<seed>)."),
          set_: List[str] = typer.Option([], "--set", help="Override a recipe key, e.g. --set optim.lr=5e-4 (repeatable)."),
          seed: Optional[int] = typer.Option(None, "--seed", help="Seed (train.seed); another seed is the same recipe, not an override."),
          seeds: Optional[str] = typer.Option(None, "--seeds", help=SEEDS_HELP),
          resume: bool = typer.Option(False, "--resume", help="Continue from the run directory's last checkpoint."),
          overwrite: bool = typer.Option(False, "--overwrite", help="Replace the run the run directory already holds."),
          allow_recipe_change: bool = typer.Option(False, "--allow-recipe-change",
                                                   help="With --resume: continue under a recipe that differs from the checkpoint's."),
          print_config: bool = typer.Option(False, "--print-config", help="Print the resolved recipe and exit."),
          root: Path = typer.Option(None, "--root", help="Prepared corpora (default data/ or $LNREPRO_DATA)."),
          results: Path = typer.Option(Path("results"), "--results", help="Where run records are written."),
          threads: Optional[int] = typer.Option(None, "--threads", min=1, max=MAX_THREADS, help="CPU threads (default $LNREPRO_THREADS or all cores)."),
          cuda_graphs: bool = typer.Option(False, "--cuda-graphs", help=CUDA_GRAPHS_HELP),
          tokens_per_gpu: Optional[int] = typer.Option(None, "--tokens-per-gpu", help=TOKENS_PER_GPU_HELP),
          precision: Optional[str] = typer.Option(None, "--precision", help=PRECISION_HELP),
          tensorboard: bool = typer.Option(False, "--tensorboard", help="Also write TensorBoard event files to RUN_DIR/tb (pip install -e '.[tb]')."),
          replace_record: bool = typer.Option(False, "--replace-record", help=REPLACE_HELP),
          trust_checkpoints: bool = typer.Option(False, "--trust-checkpoints", help=TRUST_HELP)):
    """Train one table cell. Under torchrun, every process runs this command.

    Example: lnrepro train recipes/18L-18L-b2t.yaml --scale mini
    """
    from repro.config import PRECISIONS, resolve
    if precision is not None and precision not in PRECISIONS:
        fail(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if seeds is not None:
        return train_seeds(recipe, scale, seed_list_of(seeds, seed, print_config), run_dir, set_, resume, overwrite,
                           allow_recipe_change, root, results, threads, precision, tensorboard, replace_record,
                           trust_checkpoints, cuda_graphs, tokens_per_gpu)
    try:
        resolved = resolve(recipe, scale, [*set_, *([f"train.seed={seed}"] if seed is not None else []),
                                           *precision_override(recipe, scale, precision)])
    except RecipeError as e:
        fail(str(e))
    from repro.train.loop import describe_batching
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        batching = describe_batching(resolved.recipe, tokens_per_gpu, world)
    except ValueError as e:
        fail(str(e))
    if print_config:
        return show_config(recipe, scale, resolved, batching)
    if run_dir is not None and str(run_dir).strip() in ("", "."):
        fail(f"--run-dir {str(run_dir)!r}: names no run folder (a run needs a folder of its own)")
    before_training(threads, trust_checkpoints, results, root, scale)
    from repro.results import check_record_slot
    from repro.train.loop import train_run
    run_dir = run_dir or default_run_dir(Path("runs"), resolved)
    check_folder(run_dir, "--run-dir")
    slot = say_before_training(resolved, results)
    try:  # refuse before training, not after, when the record could not be written
        check_record_slot(slot, resolved.hash(), run_dir, replace_record)
        status = train_run(resolved, run_dir, root or default_root(), resume=resume, overwrite=overwrite,
                           allow_recipe_change=allow_recipe_change, cuda_graphs=cuda_graphs,
                           tokens_per_gpu=tokens_per_gpu, tensorboard=tensorboard)
    except _known_errors() as e:
        fail(str(e))
    if status["status"] == "interrupted":  # checkpointed, no record: the run has not ended
        if int(os.environ.get("RANK", "0")) == 0:
            again = ["lnrepro train", str(recipe), "--scale", scale, *(f"--set {x}" for x in set_),
                     *([f"--seed {seed}"] if seed is not None else []), "--run-dir", str(run_dir),
                     *options_again(root, results, threads, precision, tokens_per_gpu, cuda_graphs, tensorboard),
                     "--resume"]
            console.print(f"stopped by {status['reason']}, checkpoint written; continue with: {' '.join(again)}",
                          markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(130)
    if int(os.environ.get("RANK", "0")) == 0:
        record_finished(results, run_dir, status, resolved, replace_record)
        if status["status"] == "completed":
            console.print(f"next: lnrepro evaluate {run_dir}" + (f" --root {root}" if root is not None else "")
                          + (f" --results {results}" if results != Path("results") else "")
                          + "  (decodes and scores the test sets into the record)", markup=False, highlight=False,
                          soft_wrap=True)


def seed_list_of(seeds: str, seed: int | None, print_config: bool) -> list[int]:
    """--seeds, checked against the options a group cannot take."""
    if seed is not None:
        fail("--seed and --seeds: give one of them")
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as e:
        fail(str(e))
    if print_config:
        fail("--print-config prints one run's recipe: give --seed N instead of --seeds")
    return seed_list


def show_config(recipe: Path, scale: str, resolved, batching: str) -> None:
    """--print-config: the resolved recipe, what the scale's runs are where its description does not say, and the
    batching."""
    from repro.config import SCALE_NOTES, dump_yaml
    note = f"# scale {scale}: {SCALE_NOTES[scale]}\n" if scale in SCALE_NOTES else ""
    print(f"# {recipe} at scale {scale}\n{note}# batching: {batching}\n" + dump_yaml(resolved.recipe), end="")


def say_before_training(resolved, results: Path) -> Path:
    """A warmup the run never leaves, and where its record goes (and what is there); returns that path."""
    from repro.results import record_path
    optim = resolved.recipe.optim
    if optim.warmup_updates >= optim.max_updates and variant_warms(resolved):
        console.print(f"warning: optim.warmup_updates {optim.warmup_updates} >= optim.max_updates "
                      f"{optim.max_updates}: this run never leaves warmup", soft_wrap=True)
    slot = record_path(results, resolved.scale, resolved.name, resolved.recipe.train.seed, resolved.overrides,
                       resolved.hash())
    if int(os.environ.get("RANK", "0")) == 0:
        console.print(f"this run's record: {slot}" + (f" (one exists: {describe_record(slot)})" if slot.is_file()
                                                      else ""), soft_wrap=True)
    return slot


def options_again(root: Path | None, results: Path, threads: int | None, precision: str | None,
                  tokens_per_gpu: int | None, cuda_graphs: bool, tensorboard: bool) -> list[str]:
    """The options a continued run must be given again to train as it did (its threads, precision, batching)."""
    return [*(["--root", str(root)] if root is not None else []),
            *(["--results", str(results)] if results != Path("results") else []),
            *(["--threads", str(threads)] if threads is not None else []),
            *(["--precision", precision] if precision is not None else []),
            *(["--tokens-per-gpu", str(tokens_per_gpu)] if tokens_per_gpu is not None else []),
            *(["--cuda-graphs"] if cuda_graphs else []), *(["--tensorboard"] if tensorboard else [])]


MAX_GROUP_SEEDS = 64  # one group's members: a grouped model holds every member's weights and Adam state at once
SEED_PART = re.compile(r"([0-9]+)(?:-([0-9]+))?")  # plain ASCII decimals: no "1_000", "+1", "1-", other digits


def parse_seeds(text: str) -> list[int]:
    """'1-8', '1,3,5' or '1-3,7' as a list of distinct seeds, at most MAX_GROUP_SEEDS of them; a ValueError names
    what does not parse."""
    out = []
    for part in text.split(","):
        m = SEED_PART.fullmatch(part.strip())
        if not m:
            raise ValueError(f"--seeds {text!r}: {part.strip()!r} is not a seed or a range like 1-8")
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        if last < first:
            raise ValueError(f"--seeds {text!r}: {part.strip()!r} is not an increasing range of seeds")
        if last - first + 1 + len(out) > MAX_GROUP_SEEDS:
            raise ValueError(f"--seeds {text!r}: more than {MAX_GROUP_SEEDS} seeds in one group")
        out += range(first, last + 1)
    if len(set(out)) < len(out):
        raise ValueError(f"--seeds {text!r}: a seed is named twice")
    return out


def record_finished(results: Path, run_dir: Path, status: dict, resolved, replace_record: bool) -> None:
    """Write an ended run's record (and say so); a record that cannot be written is a one-line error. A record of
    this very run already in place (a finished run resumed, perhaps evaluated since) is kept as it is."""
    import json

    from repro.results import record_path, write_record
    slot = record_path(results, resolved.scale, resolved.name, resolved.recipe.train.seed, resolved.overrides,
                       resolved.hash())
    try:
        kept = json.loads(slot.read_text(encoding="utf-8")) if slot.is_file() else None
    except (OSError, ValueError):
        kept = None
    if isinstance(kept, dict) and kept.get("started") == status.get("started"):
        console.print(f"{run_dir}: {status['status']} after {status['step']} updates; its record {slot} is kept",
                      markup=False, highlight=False, soft_wrap=True)
        return
    try:
        path = write_record(results, run_record(run_dir, status, resolved, metrics={}), Path(run_dir) / "log.jsonl",
                            replace=replace_record)
    except _known_errors() as e:
        fail(f"{e} (the run itself is complete in {run_dir}: `lnrepro evaluate` writes its record again)")
    colour = "green" if status["status"] == "completed" else "yellow"
    console.print(f"{run_dir}: {status['status']} after {status['step']} updates ({status['duration_s']} s)"
                  f"{': ' + status['reason'] if status['reason'] else ''}; record {path}", style=colour,
                  soft_wrap=True)


def train_seeds(recipe: Path, scale: str, seeds: list[int], run_dir: Path | None, set_: list[str], resume: bool,
                overwrite: bool, allow_recipe_change: bool, root: Path | None, results: Path, threads: int | None,
                precision: str | None, tensorboard: bool, replace_record: bool, trust_checkpoints: bool,
                cuda_graphs: bool = False, tokens_per_gpu: int | None = None) -> None:
    """`train --seeds`: the seeds of one recipe as one group, each to its own run folder and record."""
    from repro.config import resolve
    from repro.results import check_record_slot, record_path
    from repro.train.loop import train_group
    try:
        recipes = [resolve(recipe, scale, [*set_, f"train.seed={s}", *precision_override(recipe, scale, precision)])
                   for s in seeds]
        from repro.train.group import check_group
        check_group(recipes, int(os.environ.get("WORLD_SIZE", "1")), cuda_graphs)  # before anything is touched
    except (RecipeError, ValueError) as e:
        fail(str(e))
    before_training(threads, trust_checkpoints, results, root, scale)
    parent = run_dir or Path("runs")
    check_folder(parent, "--run-dir")
    run_dirs = [default_run_dir(parent, res) for res in recipes]
    try:
        for res, d in zip(recipes, run_dirs):
            slot = record_path(results, scale, res.name, res.recipe.train.seed, res.overrides, res.hash())
            check_record_slot(slot, res.hash(), d, replace_record)
        recorded = set()

        def on_finish(i: int, status: dict) -> None:
            recorded.add(i)
            record_finished(results, run_dirs[i], status, recipes[i], replace_record)
        statuses = train_group(recipes, run_dirs, root or default_root(), resume=resume, overwrite=overwrite,
                               allow_recipe_change=allow_recipe_change, cuda_graphs=cuda_graphs,
                               tokens_per_gpu=tokens_per_gpu, tensorboard=tensorboard, on_finish=on_finish)
    except _known_errors() as e:
        fail(str(e))
    for i, status in enumerate(statuses):  # members that had ended before: a record lost to a kill is written now
        if i not in recorded and status.get("status") in ("completed", "failed"):
            record_finished(results, run_dirs[i], status, recipes[i], replace_record)
    if any(st["status"] == "interrupted" for st in statuses):
        again = " ".join(["lnrepro train", str(recipe), "--scale", scale, *(f"--set {x}" for x in set_),
                          "--seeds", ",".join(map(str, seeds)), *(["--run-dir", str(run_dir)] if run_dir else []),
                          *options_again(root, results, threads, precision, tokens_per_gpu, cuda_graphs, tensorboard),
                          "--resume"])
        console.print(f"stopped by {statuses[0]['reason']}, checkpoints written; continue with: {again}",
                      markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(130)


def describe_record(path: Path) -> str:
    """A committed record in a few words: its status, start and commit."""
    import json
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        return (f"{rec.get('status', '?')}, started {str(rec.get('started', '?'))[:10]}, commit "
                f"{str(rec.get('commit', '?'))[:7]}")
    except (ValueError, OSError, AttributeError):
        return "unreadable"


def run_record(run_dir: Path, status: dict, resolved, metrics: dict) -> dict:
    from repro.model import version as model_code
    from repro.results import status_provenance
    return {"run_id": Path(run_dir).name, "run_dir": str(run_dir), "recipe": f"recipes/{resolved.name}.yaml",
            "recipe_name": resolved.name, "recipe_hash": resolved.hash(), "overrides": resolved.overrides,
            "task": resolved.recipe.task, "variant": resolved.recipe.model.variant,
            "encoder_layers": resolved.recipe.model.encoder_layers,
            "decoder_layers": resolved.recipe.model.decoder_layers,
            "scale": resolved.scale, "seed": resolved.recipe.train.seed, "commit": status["commit"],
            "model_code": model_code.of_status(status, resolved.recipe.model.variant),
            "hardware": status["hardware"], "started": status["started"], "duration_s": status["duration_s"],
            "updates": status["step"], "status": status["status"], "reason": status["reason"], "metrics": metrics,
            **status_provenance(status)}


@app.command()
def evaluate(run: Path = typer.Argument(..., help="A run directory written by `lnrepro train`."),
             root: Path = typer.Option(None, "--root", help="Prepared corpora (default data/ or $LNREPRO_DATA)."),
             results: Path = typer.Option(Path("results"), "--results", help="Where run records are written."),
             threads: Optional[int] = typer.Option(None, "--threads", min=1, max=MAX_THREADS, help="CPU threads (default $LNREPRO_THREADS or all cores)."),
             replace_record: bool = typer.Option(False, "--replace-record", help=REPLACE_HELP),
             trust_checkpoints: bool = typer.Option(False, "--trust-checkpoints", help=TRUST_HELP)):
    """Average the last checkpoints, decode/score every test split, write metrics.json and the run's record.

    Example: lnrepro evaluate runs/6L-6L-b2t-mini-s1
    """
    set_threads(threads)
    if trust_checkpoints:
        from repro.train.checkpoint import TRUST
        os.environ[TRUST] = "1"
    check_folder(results, "--results")
    from repro.eval.evaluate import evaluate_run, load_run
    from repro.results import check_record_slot, record_path, write_record
    from repro.train.lock import run_lock
    try:  # the run folder locked: no training may replace the run while its record is made
        with run_lock(Path(run)):
            status, resolved = load_run(run)  # read once: the record and the evaluation are of one run
            check_record_slot(record_path(results, resolved.scale, resolved.name, resolved.recipe.train.seed,
                                          resolved.overrides, resolved.hash()), resolved.hash(), run, replace_record)
            metrics = evaluate_run(run, root or default_root(), loaded=(status, resolved))
            if status["status"] != "completed":
                console.print(f"run {run} has status {status['status']} ({status.get('reason', '')}): nothing to "
                              f"decode")
            path = write_record(results, run_record(run, status, resolved,
                                                    metrics if status["status"] == "completed" else {}),
                                Path(run) / "log.jsonl", replace=replace_record)
    except _known_errors() as e:
        fail(str(e))
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
                  threads: Optional[int] = typer.Option(None, "--threads", min=1, max=MAX_THREADS, help="CPU threads (default $LNREPRO_THREADS or all cores).")):
    """Translate with a fairseq checkpoint in lnrepro's model and beam search, and score it with SacreBLEU.

    Example: lnrepro score-fairseq b2t_layer18_ave10.pt --dict dict.en.txt --bpe-codes code --test-set wmt14/full --lenpen 0.6 --variant b2t
    """
    from repro.eval import fairseq_import as fi
    from repro.progress import progress_bar
    from repro.files import atomic_write_text
    set_threads(threads)
    if (source is None) == (test_set is None):
        fail("give the sentences with --source FILE or --test-set NAME (one of them)")
    for path, option in ((checkpoint, "checkpoint"), (dictionary, "--dict"), (bpe_codes, "--bpe-codes")):
        if path is not None and not Path(path).is_file():  # before any test set is downloaded
            fail(f"{option} {path}: no such file")
    if out is not None and Path(out).is_dir():
        fail(f"--out {out}: a folder; give a file to write the hypotheses to")
    if not math.isfinite(lenpen):
        fail(f"--lenpen {lenpen}: a finite number (the authors: 0.6 or 1.0)")
    if not (math.isfinite(max_len_a) and 0 <= max_len_a <= 100):
        fail(f"--max-len-a {max_len_a}: from 0 to 100 (fairseq's generate.py: 0)")
    src_lang, _, tgt_lang = langpair.partition("-")
    try:
        if test_set is not None:
            lines, references = sacrebleu_test_set(test_set, langpair)
        else:
            lines = read_lines(source, "--source")
            if not lines:
                raise ValueError(f"--source {source}: no sentence in it")
            references = read_lines(reference, "--reference") if reference is not None else None
        if references is not None and len(references) != len(lines):
            raise ValueError(f"{len(lines)} sources but {len(references)} references")
        pipeline = fi.TextPipeline(src_lang, tgt_lang, tokenizer, bpe_codes)
        model, read_as = fi.load_model(checkpoint, variant)
        symbols = fi.read_dictionary(dictionary)
        fi.check_dictionary(symbols, model, dictionary, checkpoint)
        with progress_bar("translate", len(lines)) as bar:
            outputs = fi.translate(model, symbols, [pipeline.encode(l) for l in lines], beam, lenpen, max_len_a,
                                   max_len_b, progress=bar.advance)
    except (fi.FairseqImportError, ValueError, RecipeError) as e:
        fail(str(e))
    hypotheses = [pipeline.decode(h) for h in outputs]
    if out is not None:
        atomic_write_text(out, "".join(h + "\n" for h in hypotheses))
    console.print(f"{checkpoint} read as {read_as}: {len(hypotheses)} sentences translated"
                  + (f", written to {out}" if out else ""), soft_wrap=True)
    if references is not None:
        from repro.eval.metrics import bleu
        score, signature = bleu(hypotheses, references)
        print(f"BLEU {score:.2f} ({signature})")


def read_lines(path: Path, option: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{option} {path}: cannot be read ({type(e).__name__})") from None


def sacrebleu_test_set(name: str, langpair: str) -> tuple[list[str], list[str]]:
    """A SacreBLEU test set's sources and first references (SacreBLEU downloads it once into ~/.sacrebleu)."""
    from sacrebleu.dataset import DATASETS
    if name not in DATASETS:
        raise ValueError(f"--test-set {name!r}: not a SacreBLEU test set (e.g. wmt14/full, wmt16)")
    data = DATASETS[name]
    try:
        src = data.get_source_file(langpair)
        ref = data.get_reference_files(langpair)[0]
    except Exception as e:  # SacreBLEU's download errors come in several kinds
        raise ValueError(f"--test-set {name} {langpair}: SacreBLEU could not provide it ({type(e).__name__}: {e})") from None
    return read_lines(Path(src), "--test-set"), read_lines(Path(ref), "--test-set")


@app.command()
def table(number: int = typer.Argument(..., help="Table number: the paper's 1 to 10, or 11, the extension (newer placements)."),
          scale: str = typer.Option("paper", "--scale", help="Which scale's runs fill the 'ours' column."),
          fmt: str = typer.Option("text", "--format", help="text, markdown, latex, csv or json."),
          paper_version: str = typer.Option("en", "--paper", help="en (arXiv, default) or ja (NLP2022 workshop)."),
          results: Path = typer.Option(Path("results"), "--results", help="Folder of run records."),
          sets: list[str] = typer.Option([], "--set", help="An ablation: also show ours from the runs trained with "
                                         "this override (train RECIPE --set KEY=VALUE); repeatable.")):
    """Paper values beside ours, with the difference, for one table.

    Example: lnrepro table 1 --scale mini --format markdown
    Example: lnrepro table 1 --scale tiny --set optim.lr=0.0005
    """
    check_scale(scale)
    if number not in (7,):  # Table 7 is read from the recipes alone
        check_results(results)
    from repro.tables.render import render_table
    try:
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
           results: Path = typer.Option(Path("results"), "--results", help="Folder of run records.")):
    """Draw one of the paper's figures as a PNG.

    Example: lnrepro figure 3 --out fig3.png --json fig3.json
    """
    check_scale(scale)
    if d_model % 8:
        fail(f"--d-model {d_model}: must be a multiple of the 8 attention heads")
    if number in (1, 5, 6, 8, 9):
        check_results(results)
    out = out or Path("figures") / f"figure{number}.png"
    try:
        if number in (3, 4, 7):
            from repro.figures.gradients import figure_gradients
            figure_gradients(number, out, json_path, layers, d_model, updates, root or default_root())
        elif number in (1, 5, 6, 8, 9):
            from repro.figures.runs import figure_from_runs
            figure_from_runs(number, out, json_path, results, scale, root or default_root())
        else:
            fail(f"figure {number}: " + ("the paper's figure 2 is a diagram of the layers, not a result; "
                                         if number == 2 else "the paper's figures are 1 to 9; ")
                 + "the figures drawn are 1 and 3 to 9")
    except _known_errors() as e:
        fail(str(e))
    console.print(f"wrote {out}")


@app.command()
def curves(run_dirs: List[Path] = typer.Argument(..., help="Run directories (or records' .log.jsonl files)."),
           out: Path = typer.Option(Path("figures/curves.png"), "--out", help="PNG path."),
           json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the plotted numbers as JSON.")):
    """Draw the training loss and validation NLL of any runs into one PNG, from their logs.

    Example: lnrepro curves runs/6L-6L-b2t-mini-s1 runs/6L-6L-pre_ln-mini-s1 --out curves.png
    """
    from repro.figures.curves import draw_curves
    try:
        draw_curves(run_dirs, out, json_path)
    except _known_errors() as e:
        fail(str(e))
    console.print(f"wrote {out}", markup=False, highlight=False)


@app.command()
def recipes(folder: Path = typer.Argument(Path("recipes"), help="Folder of recipes."),
            check: bool = typer.Option(False, "--check", help="Load every recipe at every scale; exit 2 on the first problem.")):
    """List every recipe (task, variant, depths); with --check, validate them all.

    Example: lnrepro recipes --check
    """
    from repro.config import SCALES, load_raw, resolve
    from repro.tables.render import plain_table
    files = sorted(p for p in folder.rglob("*.yaml") if not {"base", "calibration"} & set(p.relative_to(folder).parts))
    if not files:
        fail(f"{folder}: no recipes found")
    rows = []
    for p in files:
        try:
            res = resolve(p)
            scales = ["paper"] + [s for s in SCALES[1:] if s in (load_raw(p).get("scales") or {})]
            if check:
                for s in scales[1:]:
                    resolve(p, s)
        except RecipeError as e:
            fail(str(e))
        m = res.recipe.model
        depth = f"{m.decoder_layers}L" if res.recipe.task == "lm" else f"{m.encoder_layers}L-{m.decoder_layers}L"
        rows.append([str(p.relative_to(folder)), res.recipe.task, m.variant, depth, ",".join(scales[1:]) or "-"])
    # plain and aligned: a recipe's path (under the folder named above it) is never cut, whatever the terminal's width
    print(f"{len(files)} recipes in {folder}/, each at paper scale and the scales listed\n\n" + plain_table(["recipe", "task", "variant", "depth", "scales"],
                                                                   rows), end="")
    if check:
        console.print(f"all {len(files)} recipes load at every scale they define", style="green")


@app.command()
def claims(scale: str = typer.Option("mini", "--scale", help="Whose records to judge."),
           fmt: str = typer.Option("text", "--format", help="text, markdown or json."),
           rules: str = typer.Option(None, "--rules", help="Which dated version of the judging rules (v1, v2, v3; "
                                     "default the current one)."),
           changed: bool = typer.Option(False, "--changed", help="List the verdicts that changed from the previous "
                                        "version of the rules to --rules instead."),
           results: Path = typer.Option(Path("results"), "--results", help="Folder of run records.")):
    """Judge the paper's findings against results/: reproduced, not reproduced, inconclusive or not run.

    Example: lnrepro claims --scale mini --format markdown
    """
    check_scale(scale)
    check_results(results)
    from repro.verdicts import render_changed, render_claims
    from repro.judging import CURRENT, RULES
    rules = rules or CURRENT
    if rules not in RULES:
        fail(f"--rules {rules!r}: expected one of {', '.join(RULES)}")
    versions = list(RULES)
    if changed and rules == versions[0]:
        fail(f"--changed --rules {rules}: {rules} is the first version; nothing came before it")
    try:
        out = (render_changed(results, scale, versions[versions.index(rules) - 1], rules,
                              "markdown" if fmt == "markdown" else "text") if changed
               else render_claims(results, scale, fmt, rules))
    except ValueError as e:
        fail(str(e))
    if out is not None:
        print(out, end="")


@app.command()
def report(scale: str = typer.Option("mini", "--scale", help="Whose records the results page shows."),
           docs: Path = typer.Option(Path("docs"), "--docs", help="Where the pages go."),
           results: Path = typer.Option(Path("results"), "--results", help="Folder of run records.")):
    """Write the generated pages: docs/results-SCALE.md (the findings by task, tables, claims with their
    statistics, figures, runs, what is still to run) from the records, docs/cli.md from the commands' own help, and the README's generated blocks
    (the claims, the regime).

    Example: lnrepro report --scale mini
    """
    check_scale(scale)
    check_results(results)
    check_folder(docs, "--docs")
    from repro.report import write_pages
    # the README's blocks show the committed records: written only from results/ into docs/ beside it
    committed = results.resolve() == Path("results").resolve() and docs.resolve() == Path("docs").resolve()
    if scale == "mini" and not committed:
        console.print(f"README.md left as it is: its blocks show the committed records, not {results}",
                      markup=False, highlight=False)
    try:
        for path in write_pages(results, scale, docs, Path("README.md") if scale == "mini" and committed else None,
                                render_cli_page()):
            console.print(f"wrote {path}", highlight=False, markup=False)
    except _known_errors() as e:
        fail(str(e))


@app.command()
def references(recipe: Path = typer.Argument(..., help="A recipe whose corpus (at --scale) to compute them for."),
               scale: str = typer.Option("mini", "--scale", help="paper, mini or tiny."),
               root: Path = typer.Option(None, "--root", help="Prepared corpora (default data/ or $LNREPRO_DATA)."),
               results: Path = typer.Option(Path("results"), "--results", help="Folder of run records."),
               threads: Optional[int] = typer.Option(None, "--threads", min=1, max=MAX_THREADS, help="CPU threads (default $LNREPRO_THREADS or all cores).")):
    """Compute a prepared corpus's trivial references (unigram NLL, best constant output), which the judging
    rules fail a run against when it does not beat them; writes results/references/<corpus>.json.

    Example: lnrepro references recipes/6L-6L-b2t.yaml --scale mini --root data
    """
    check_scale(scale)
    set_threads(threads)
    from repro.config import resolve
    from repro.references import write_references
    try:
        r = resolve(recipe, scale).recipe
        path = write_references((root or default_root()) / r.data.corpus, r.task, r.data.valid_split,
                                r.data.test_splits, results)
    except _known_errors() as e:
        fail(str(e))
    console.print(f"wrote {path}")


@app.command()
def runs(scale: str = typer.Option("mini", "--scale", help="Whose records to list."),
         fmt: str = typer.Option("text", "--format", help="text, markdown, csv or json."),
         missing: bool = typer.Option(False, "--missing", help="List the runs still to make instead: the seeds each "
                                      "cell needs with no record (five for Table 1 and the cells claims compare, "
                                      "more where a claim's power asks; three elsewhere), and the hours of training "
                                      "they need on each machine the records trained on."),
         results: Path = typer.Option(Path("results"), "--results", help="Folder of run records.")):
    """List the runs behind the tables: status, updates, training and evaluation time, machine, start, commit.

    Example: lnrepro runs --scale mini --format markdown; lnrepro runs --scale mini --missing
    """
    check_scale(scale)
    check_results(results)
    from repro.tables.runs import render_missing, render_runs
    try:
        out = render_missing(results, scale, fmt) if missing else render_runs(results, scale, fmt)
    except ValueError as e:
        fail(str(e))
    if out is not None:
        print(out, end="")


@app.command()
def reproduce(table_number: int = typer.Argument(..., metavar="TABLE", help="Table 1-6, 9, 10 or 11 (the extension)."),
              scale: str = typer.Option("paper", "--scale", help="paper, mini or tiny."),
              seeds: int = typer.Option(1, "--seeds", help="Seeds 1..N per cell."),
              jobs: int = typer.Option(2, "--jobs", help="Runs at once (local launcher)."),
              threads: Optional[int] = typer.Option(None, "--threads", min=1, max=MAX_THREADS, help="CPU threads per run (default: cores / jobs)."),
              launcher: str = typer.Option("local", "--launcher", help="local, slurm, or submitit-local (the SLURM path on this machine)."),
              plan_only: bool = typer.Option(False, "--plan", help="Print the runs, what is done, partial or missing; run nothing."),
              cells: List[str] = typer.Option([], "--cells", help="GROUP or GROUP:METHOD, e.g. 6L-6L or 18L-18L:b2t (repeatable)."),
              slurm_config: Optional[Path] = typer.Option(None, "--slurm-config", help="YAML with partition, account, qos, constraint, time, gpus, cpus."),
              partition: Optional[str] = typer.Option(None, "--partition", help="SLURM partition."),
              account: Optional[str] = typer.Option(None, "--account", help="SLURM account."),
              time_min: Optional[int] = typer.Option(None, "--time", help="SLURM time limit per run, minutes."),
              gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs per SLURM job (torchrun inside when > 1)."),
              runs: Path = typer.Option(Path("runs"), "--runs", help="Where run directories live."),
              root: Path = typer.Option(None, "--root", help="Prepared corpora (default data/ or $LNREPRO_DATA)."),
              results: Path = typer.Option(Path("results"), "--results", help="Folder of run records."),
              cuda_graphs: bool = typer.Option(False, "--cuda-graphs", help=CUDA_GRAPHS_HELP),
              tokens_per_gpu: Optional[int] = typer.Option(None, "--tokens-per-gpu", help=TOKENS_PER_GPU_HELP),
              group: Optional[bool] = typer.Option(None, "--group/--no-group", help=GROUP_HELP)):
    """Run every cell of a table (train, evaluate; finished runs skipped, interrupted ones resumed), then render it.

    Example: lnrepro reproduce 1 --scale mini --seeds 3 --jobs 16
    """
    check_scale(scale)
    if launcher not in ("local", "slurm", "submitit-local"):
        fail(f"--launcher {launcher!r}: expected local, slurm or submitit-local")
    if jobs < 1:
        fail(f"--jobs {jobs}: expected at least 1")
    data_root = root or default_root()
    for folder, option in ((results, "--results"), (runs, "--runs"), (data_root, "--root")):
        check_folder(folder, option)
    from repro import reproduce_run
    slurm = {"config": slurm_config, "partition": partition, "account": account, "time": time_min, "gpus": gpus}
    try:
        reproduce_run.run(table_number, scale, seeds, cells, jobs, threads, launcher, plan_only, slurm, runs,
                          data_root, results, cuda_graphs, tokens_per_gpu, group)
    except (ValueError, RecipeError) as e:
        fail(str(e))


@app.command()
def calibrate(task: str = typer.Argument(..., help=f"One of: {', '.join(CALIBRATION_TASKS)} (spec: recipes/calibration/v2/TASK.yaml; v1's one folder up)."),
              jobs: Optional[int] = typer.Option(None, "--jobs", help="Runs at once (default: one per core, each on one thread)."),
              threads: Optional[int] = typer.Option(None, "--threads", min=1, max=MAX_THREADS, help="CPU threads per run (default: cores / jobs)."),
              decide_only: bool = typer.Option(False, "--decide-only", help="Apply the rule to the committed records; run nothing."),
              train_grid: bool = typer.Option(False, "--train", help="Train the grid's runs even where committed records already decide."),
              runs: Path = typer.Option(Path("runs/calibration"), "--runs", help="Where the calibration runs train."),
              root: Path = typer.Option(None, "--root", help="Prepared corpora (default data/ or $LNREPRO_DATA)."),
              results: Path = typer.Option(Path("results"), "--results", help="Folder of run records."),
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
    if task not in CALIBRATION_TASKS:
        fail(f"calibrate {task!r}: unknown task (expected one of {', '.join(CALIBRATION_TASKS)})")
    jobs = jobs if jobs is not None else os.cpu_count() or 1
    if jobs < 1:
        fail(f"--jobs {jobs}: expected at least 1")
    if rules not in ("v1", "v2"):
        fail(f"--rules {rules!r}: expected v1 or v2")
    if rules == "v2":
        # a grouped grid's jobs name their task's own runs folder
        from repro import calibration_run
        try:
            return calibration_run.run(task, jobs, threads, decide_only, runs if train_group else runs / "v2" / task,
                                       root or default_root(), results, group, train_group, tokens_factor,
                                       cuda_graphs, one_forward, setting)
        except (RecipeError, ValueError, OSError) as e:
            fail(str(e))
    from repro import calibration_v1
    try:
        calibration_v1.run(task, jobs, threads, decide_only, train_grid, runs, root or default_root(), results)
    except (RecipeError, ValueError) as e:
        fail(str(e))

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
          root: Path = typer.Option(None, "--root", help="Prepared corpora (default data/ or $LNREPRO_DATA)."),
          results: Path = typer.Option(Path("results"), "--results", help="Folder of run records.")):
    """The runs the claims still need, as decisive sets ordered by claims decided per priced hour; --run trains
    them in that order.

    Example: lnrepro queue --hours 10
    """
    import torch

    from repro import queue as evidence_queue
    from repro.launch import default_threads, run_jobs
    from repro.queue import default_runs
    check_scale(scale)
    check_results(results)
    if fmt not in ("text", "json"):
        fail(f"--format {fmt!r}: expected text or json")
    on_gpu = torch.cuda.is_available()
    try:
        sets = evidence_queue.build(results, scale, on_gpu)
    except (RecipeError, ValueError, OSError) as e:
        fail(str(e))
    print(evidence_queue.render(sets, hours, fmt, limit), end="")
    if not run:
        return
    chosen = evidence_queue.within(sets, hours)[:limit]
    runs_dir = (runs or default_runs()).expanduser()
    check_folder(runs_dir, "--runs")
    parallel = jobs or (1 if on_gpu else os.cpu_count() or 1)
    if parallel < 1:
        fail(f"--jobs {parallel}: expected at least 1")
    todo = evidence_queue.jobs(chosen, results, runs_dir, root or default_root(), on_gpu, scale)
    if not todo:
        console.print("nothing queued to train", markup=False)
        return
    collect, settle = evidence_queue.watch(chosen, results, runs_dir)
    console.print(f"training {len(todo)} job(s), {min(parallel, len(todo))} at once, in {runs_dir}", markup=False,
                  highlight=False)
    done = run_jobs(todo, parallel, default_threads(parallel, len(todo)), on_finish=collect, on_tick=settle,
                    tick_s=30.0)
    collect()
    bad = [j.name for j in done if j.state != "done"]
    if bad:
        fail(f"jobs that did not finish: {', '.join(bad)} (their logs are in their run folders under {runs_dir})")


def render_cli_page(width: int = 100) -> str:
    """Every command's --help, as `lnrepro COMMAND --help` prints it at `width` columns."""
    import click
    import typer

    group = typer.main.get_command(app)
    out = ["# The command line", "", "Generated from the commands themselves by `lnrepro report`; never edited by hand.",
           ""]
    with click.Context(group, info_name="lnrepro", terminal_width=width, max_content_width=width) as ctx:
        out += ["```", group.get_help(ctx), "```", ""]
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            with click.Context(command, info_name=f"lnrepro {name}", parent=None, terminal_width=width,
                               max_content_width=width) as sub:
                out += [f"## lnrepro {name}", "", "```", command.get_help(sub), "```", ""]
    return "\n".join(out)


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
