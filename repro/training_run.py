"""What `lnrepro train` and `lnrepro evaluate` do once their options are parsed: resolve the recipe (one seed, or a
group of seeds trained as one batched model), check the record's slot before any training, train, and write the
run's record (repro/results.py) with what it says of itself. Every refusal is a ValueError (RecipeError,
CheckpointError...) of one line, which the command line prints; a run stopped by a signal returns exit code 130
with the command that continues it."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from repro.config import RecipeError, resolve
from repro.options import check_folder, default_root, set_threads, trust_checkpoints
from repro.progress import console

INTERRUPTED = 130  # the exit code of a run stopped by a signal, checkpointed, without a record yet
MAX_GROUP_SEEDS = 64  # one group's members: a grouped model holds every member's weights and Adam state at once
SEED_PART = re.compile(r"([0-9]+)(?:-([0-9]+))?")  # plain ASCII decimals: no "1_000", "+1", "1-", other digits


@dataclass
class TrainOptions:
    """How `lnrepro train` trains and where it writes, as given on its command line."""
    scale: str = "paper"
    set_: list[str] = field(default_factory=list)
    run_dir: Path | None = None
    resume: bool = False
    overwrite: bool = False
    allow_recipe_change: bool = False
    root: Path | None = None
    results: Path = Path("results")
    threads: int | None = None
    cuda_graphs: bool = False
    tokens_per_gpu: int | None = None
    precision: str | None = None
    tensorboard: bool = False
    replace_record: bool = False
    trust_checkpoints: bool = False

    @property
    def data_root(self) -> Path:
        return self.root or default_root()

    def again(self, recipe: Path, seeds: list[str], run_dir: Path | None) -> str:
        """The command that continues a stopped run: the options it must be given again to train as it did (its
        threads, precision, batching), and --resume."""
        o = self
        return " ".join(["lnrepro train", str(recipe), "--scale", o.scale, *(f"--set {x}" for x in o.set_), *seeds,
                         *(["--run-dir", str(run_dir)] if run_dir is not None else []),
                         *(["--root", str(o.root)] if o.root is not None else []),
                         *(["--results", str(o.results)] if o.results != Path("results") else []),
                         *(["--threads", str(o.threads)] if o.threads is not None else []),
                         *(["--precision", o.precision] if o.precision is not None else []),
                         *(["--tokens-per-gpu", str(o.tokens_per_gpu)] if o.tokens_per_gpu is not None else []),
                         *(["--cuda-graphs"] if o.cuda_graphs else []), *(["--tensorboard"] if o.tensorboard else []),
                         "--resume"])


def train_one(recipe: Path, seed: int | None, print_config: bool, o: TrainOptions) -> int:
    """`train RECIPE`: one run, to its folder and record; returns the exit code (0, or INTERRUPTED)."""
    from repro.results import check_record_slot
    from repro.train.loop import describe_batching, train_run
    resolved = resolve(recipe, o.scale, [*o.set_, *([f"train.seed={seed}"] if seed is not None else []),
                                         *precision_override(recipe, o.scale, o.precision)])
    batching = describe_batching(resolved.recipe, o.tokens_per_gpu, int(os.environ.get("WORLD_SIZE", "1")))
    if print_config:
        show_config(recipe, o.scale, resolved, batching)
        return 0
    if o.run_dir is not None and str(o.run_dir).strip() in ("", "."):
        raise ValueError(f"--run-dir {str(o.run_dir)!r}: names no run folder (a run needs a folder of its own)")
    before_training(o)
    run_dir = o.run_dir or resolved.run_folder(Path("runs"))
    check_folder(run_dir, "--run-dir")
    slot = say_before_training(resolved, o.results)
    check_record_slot(slot, resolved.hash(), run_dir, o.replace_record)  # refused before training, not after
    status = train_run(resolved, run_dir, o.data_root, resume=o.resume, overwrite=o.overwrite,
                       allow_recipe_change=o.allow_recipe_change, cuda_graphs=o.cuda_graphs,
                       tokens_per_gpu=o.tokens_per_gpu, tensorboard=o.tensorboard)
    if status["status"] == "interrupted":  # checkpointed, no record: the run has not ended
        if rank_zero():
            again = o.again(recipe, [f"--seed {seed}"] if seed is not None else [], run_dir)
            console.print(f"stopped by {status['reason']}, checkpoint written; continue with: {again}", markup=False,
                          highlight=False, soft_wrap=True)
        return INTERRUPTED
    if rank_zero():
        record_finished(o.results, run_dir, status, resolved, o.replace_record)
        if status["status"] == "completed":
            console.print(f"next: lnrepro evaluate {run_dir}" + (f" --root {o.root}" if o.root is not None else "")
                          + (f" --results {o.results}" if o.results != Path("results") else "")
                          + "  (decodes and scores the test sets into the record)", markup=False, highlight=False,
                          soft_wrap=True)
    return 0


def train_seeds(recipe: Path, seeds: list[int], o: TrainOptions) -> int:
    """`train RECIPE --seeds`: the seeds of one recipe as one group, each to its own run folder and record; returns
    the exit code (0, or INTERRUPTED)."""
    from repro.results import check_record_slot, record_path
    from repro.train.group import check_group
    from repro.train.loop import train_group
    recipes = [resolve(recipe, o.scale, [*o.set_, f"train.seed={s}", *precision_override(recipe, o.scale, o.precision)])
               for s in seeds]
    check_group(recipes, int(os.environ.get("WORLD_SIZE", "1")), o.cuda_graphs)  # before anything is touched
    before_training(o)
    parent = o.run_dir or Path("runs")
    check_folder(parent, "--run-dir")
    run_dirs = [res.run_folder(parent) for res in recipes]
    for res, d in zip(recipes, run_dirs):
        slot = record_path(o.results, o.scale, res.name, res.recipe.train.seed, res.overrides, res.hash())
        check_record_slot(slot, res.hash(), d, o.replace_record)
    recorded = set()

    def on_finish(i: int, status: dict) -> None:
        recorded.add(i)
        record_finished(o.results, run_dirs[i], status, recipes[i], o.replace_record)
    statuses = train_group(recipes, run_dirs, o.data_root, resume=o.resume, overwrite=o.overwrite,
                           allow_recipe_change=o.allow_recipe_change, cuda_graphs=o.cuda_graphs,
                           tokens_per_gpu=o.tokens_per_gpu, tensorboard=o.tensorboard, on_finish=on_finish)
    for i, status in enumerate(statuses):  # members that had ended before: a record lost to a kill is written now
        if i not in recorded and status.get("status") in ("completed", "failed"):
            record_finished(o.results, run_dirs[i], status, recipes[i], o.replace_record)
    if any(st["status"] == "interrupted" for st in statuses):
        console.print(f"stopped by {statuses[0]['reason']}, checkpoints written; continue with: "
                      f"{o.again(recipe, ['--seeds', ','.join(map(str, seeds))], o.run_dir)}", markup=False, highlight=False,
                      soft_wrap=True)
        return INTERRUPTED
    return 0


def rank_zero() -> bool:
    """The process that writes records and speaks (under torchrun, every process runs the command)."""
    return int(os.environ.get("RANK", "0")) == 0


def precision_override(recipe: Path, scale: str, precision: str | None) -> list[str]:
    """--precision as the `--set` it is, or nothing where it is the recipe's own precision."""
    from repro.config import PRECISIONS
    if precision is None:
        return []
    if precision not in PRECISIONS:
        raise ValueError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    try:
        own = resolve(recipe, scale).recipe.train.precision
    except RecipeError:
        return []  # the resolve that follows says why
    return [] if precision == own else [f"train.precision={precision}"]


def before_training(o: TrainOptions) -> None:
    """What `train` (one run or `--seeds`) settles before any training: threads, trusted checkpoints, the folders it
    reads and writes, and at scale tiny the generated corpora (a smoke test needs no prepare step)."""
    set_threads(o.threads)
    trust_checkpoints(o.trust_checkpoints)
    check_folder(o.results, "--results", writable=True)
    check_folder(o.data_root, "--root")
    if o.scale == "tiny":
        from repro.data.tiny import ensure_tiny_corpora
        ensure_tiny_corpora(o.data_root)


def seed_list(seeds: str, seed: int | None, print_config: bool) -> list[int]:
    """--seeds, checked against the options a group cannot take."""
    if seed is not None:
        raise ValueError("--seed and --seeds: give one of them")
    seed_list = parse_seeds(seeds)
    if print_config:
        raise ValueError("--print-config prints one run's recipe: give --seed N instead of --seeds")
    return seed_list


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


def show_config(recipe: Path, scale: str, resolved, batching: str) -> None:
    """--print-config: the resolved recipe, what the scale's runs are where its description does not say, and the
    batching."""
    from repro.config import SCALE_NOTES, dump_yaml
    note = f"# scale {scale}: {SCALE_NOTES[scale]}\n" if scale in SCALE_NOTES else ""
    print(f"# {recipe} at scale {scale}\n{note}# batching: {batching}\n" + dump_yaml(resolved.recipe), end="")


def say_before_training(resolved, results: Path) -> Path:
    """A warmup the run never leaves, and where its record goes (and what is there); returns that path."""
    from repro.model.variants import VARIANTS
    from repro.results import record_path
    optim = resolved.recipe.optim
    if optim.warmup_updates >= optim.max_updates and VARIANTS[resolved.recipe.model.variant].warmup:
        console.print(f"warning: optim.warmup_updates {optim.warmup_updates} >= optim.max_updates "
                      f"{optim.max_updates}: this run never leaves warmup", soft_wrap=True)
    slot = record_path(results, resolved.scale, resolved.name, resolved.recipe.train.seed, resolved.overrides,
                       resolved.hash())
    if rank_zero():
        console.print(f"this run's record: {slot}" + (f" (one exists: {describe_record(slot)})" if slot.is_file()
                                                      else ""), soft_wrap=True)
    return slot


def describe_record(path: Path) -> str:
    """A committed record in a few words: its status, start and commit."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        return (f"{rec.get('status', '?')}, started {str(rec.get('started', '?'))[:10]}, commit "
                f"{str(rec.get('commit', '?'))[:7]}")
    except (ValueError, OSError, AttributeError):
        return "unreadable"


def record_finished(results: Path, run_dir: Path, status: dict, resolved, replace_record: bool) -> None:
    """Write an ended run's record (and say so); a record that cannot be written is a one-line error. A record of
    this very run already in place (a finished run resumed, perhaps evaluated since) is kept as it is."""
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
    except (ValueError, OSError) as e:
        raise ValueError(f"{e} (the run itself is complete in {run_dir}: `lnrepro evaluate` writes its record "
                         f"again)") from None
    colour = "green" if status["status"] == "completed" else "yellow"
    console.print(f"{run_dir}: {status['status']} after {status['step']} updates ({status['duration_s']} s)"
                  f"{': ' + status['reason'] if status['reason'] else ''}; record {path}", style=colour,
                  soft_wrap=True)


def run_record(run_dir: Path, status: dict, resolved, metrics: dict) -> dict:
    """A run's record: what trained (recipe, hash, overrides, variant, depths, model-code version), where and when
    (commit, hardware, start, duration), how it ended, and its metrics; repro/results.py checks it."""
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


def evaluate(run: Path, root: Path | None, results: Path, threads: int | None, replace_record: bool,
             trust: bool) -> Path:
    """`lnrepro evaluate RUN`: average the last checkpoints, decode and score every test split, and write the run's
    record with its metrics (a failed run's without); returns the record's path."""
    from repro.eval.evaluate import evaluate_run, load_run
    from repro.results import check_record_slot, record_path, write_record
    from repro.train.lock import run_lock
    set_threads(threads)
    trust_checkpoints(trust)
    check_folder(results, "--results")
    with run_lock(Path(run)):  # the run folder locked: no training may replace the run while its record is made
        status, resolved = load_run(run)  # read once: the record and the evaluation are of one run
        check_record_slot(record_path(results, resolved.scale, resolved.name, resolved.recipe.train.seed,
                                      resolved.overrides, resolved.hash()), resolved.hash(), run, replace_record)
        metrics = evaluate_run(run, root or default_root(), loaded=(status, resolved))
        if status["status"] != "completed":
            console.print(f"run {run} has status {status['status']} ({status.get('reason', '')}): nothing to decode")
        return write_record(results, run_record(run, status, resolved,
                                                metrics if status["status"] == "completed" else {}),
                            Path(run) / "log.jsonl", replace=replace_record)
