"""The training run, in phases (Training): set-up, then per update the step, validation, stop requests and
checkpoint, then the finish.

A run directory holds recipe.yaml (resolved), log.jsonl, checkpoint_<update>.pt (last N), status.json and, for
Admin, admin_profile.json. A stop.json put there from outside (`request_stop`) ends the run at its next log line or
validation, completed, with the reason it gives. Under `torchrun` every rank runs this; rank 0 writes files.
Gradients are accumulated over update_freq = gpus_per_update / world_size batches, so tokens per update match the
paper's GPU count.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import math
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from repro.config import ResolvedRecipe, dump_yaml
from repro.data.batching import rank_batches, token_batches
from repro.data.text import PAD, read_meta
from repro.model.build import build_model
from repro.model.cpu_paths import keep_freed_memory
from repro.model.init import admin_profile, load_admin_profile, save_admin_profile
from repro.model import version as model_code
from repro.model.variants import get_variant
from repro.progress import console, progress_bar
from repro.data.text import corpus_fingerprint
from repro.files import atomic_write_text
from repro.files import read_jsonl
from repro.provenance import git_commit, hardware, now
from repro.train import checkpoint
from repro.train.graphs import GraphedUpdate, check_graphable
from repro.train.group import GroupEngine, check_group
from repro.train.health import HealthMonitor, effective_window
from repro.train.lock import RunDirError, run_lock
from repro.train.optim import inverse_sqrt_lr, load_optimizer_state, make_optimizer, normalise_and_clip
from repro.train.tasks import autocast, batch_loss, batch_tokens, open_split, to_device


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed() -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        # torch.distributed.nn takes the default group as its functions' default arguments when first imported
        # (DDP imports it, through torch._dynamo): imported once the group exists, it would hold the group for
        # good, and destroy_distributed could not end the group's worker threads
        import torch.distributed.nn  # noqa: F401
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        # destroyed at exit while the interpreter is whole: left to its finalisation, a gloo worker thread that
        # still holds a finished collective's tensors aborts a process whose training has ended (SIGABRT,
        # "terminate called without an active exception"), and torchrun then kills the other ranks
        atexit.register(destroy_distributed)
    if world > 1:
        return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    return Dist()


def destroy_distributed() -> None:
    """The process group gone and its worker threads joined. DDP sits in a reference cycle (its hooks) and may
    hold the group until a collection: one first."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


class StopRequest:
    """SIGINT (Ctrl-C) or SIGTERM while training: the update in flight finishes, a checkpoint is written and the run
    stops, resumable (`train_run` returns status "interrupted"). A second signal stops at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.name: str | None = None
        self.previous = {}

    def _handle(self, signum, frame):
        if self.name is not None:
            raise KeyboardInterrupt
        self.name = signal.Signals(signum).name

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def requested(self, world: int, device) -> bool:
        """Whether to stop after this update: on every process at once (DDP's processes must stop together)."""
        flag = self.name is not None
        if world > 1:
            t = torch.tensor([float(flag)], device=device)
            dist.all_reduce(t)
            flag = bool(t.item())
        return flag


STOP_FILE = "stop.json"


def request_stop(run_dir: Path, reason: str) -> None:
    """Ask the run training in run_dir to end at its next log line or validation, as completed with `reason`, its
    last checkpoint written: what a run is for may be settled before its max_updates (a calibration setting's length;
    repro/calibration.py)."""
    atomic_write_text(Path(run_dir) / STOP_FILE, json.dumps({"reason": reason}) + "\n")


def wall_clock_due(saved_at: float, d: Dist, device) -> bool:
    """Whether a wall-time checkpoint is due, as the main process's clock says (under torchrun every process must
    take the same branch: it all-reduces)."""
    due = time.time() - saved_at >= checkpoint.RESUME_MINUTES * 60
    if d.world > 1:
        t = torch.tensor([float(due and d.main)], device=device)
        dist.all_reduce(t)
        due = bool(t.item())
    return due


def read_stop(path: Path) -> str:
    """A stop request's reason. A file a person wrote may say it otherwise than `{"reason": "..."}`: whatever it
    holds still asks the run to stop, its text (cut short) as the reason, so that one odd file neither crashes the
    run nor stops a group's other members."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return f"stop requested ({path.name}: {e.strerror})"
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("reason"), str) and data["reason"].strip():
        return data["reason"]
    return f"stop requested ({path.name}: {' '.join(text.split())[:80] or 'empty'})"


def stop_reason(run_dir: Path, d: Dist, device) -> str | None:
    """The reason of a stop request in run_dir (`request_stop`), decided on every process at once."""
    path = Path(run_dir) / STOP_FILE
    reason = read_stop(path) if d.main and path.is_file() else None
    if d.world > 1:
        t = torch.tensor([float(reason is not None)], device=device)
        dist.all_reduce(t)
        reason = reason or ("stop requested" if t.item() else None)
    return reason


def validated_in_log(path: Path, step: int) -> bool:
    """Whether the log already holds a validation of this update."""
    return any(row.get("step") == step and "valid_nll" in row for row in read_jsonl(path, tolerant=True)[-50:]
               if isinstance(row, dict))


def bar_status(row: dict, valid_nll: float | None) -> str:
    """What the progress bar says beside the updates: the last logged loss, pace and learning rate, and the last
    validation NLL."""
    text = f"loss {row['loss']:.3f} {row['tokens_per_s'] / 1000:.1f}k tok/s lr {row['lr']:.0e}"
    return text + (f" val {valid_nll:.2f}" if valid_nll is not None else "")


def append_jsonl(path: Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def truncate_log(path: Path, step: int) -> None:
    """Keep the log rows up to update `step`, the checkpoint a run resumes from: a run stopped between checkpoints
    trains the updates after it again, and its log must hold one curve, not two. A last line cut short by the
    stop is dropped too."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row["step"] <= step:
            keep.append(line + "\n")
    atomic_write_text(path, "".join(keep))


@torch.no_grad()
def validate(model, data, recipe, device, max_tokens: int) -> float:
    """Mean NLL per target token (nats) over a split, no label smoothing, no dropout."""
    was = model.training
    model.eval()
    total_nll, total_tok = 0.0, 0
    for idx in token_batches(data.sizes, max_tokens, seed=0, epoch=0, shuffle=False):
        batch = to_device(data.collate(idx), device)
        _, nll, ntok = batch_loss(model, batch, recipe, epsilon=0.0)
        total_nll += float(nll)
        total_tok += ntok
    model.train(was)
    return total_nll / max(total_tok, 1)


class ShiftedSources:
    """A sequence-to-sequence split whose sentence i is paired with the source of sentence i + 1 (every source
    moved to another target): the source-blind check of judging rules v2 (repro/judging.py)."""

    def __init__(self, data):
        self.data, self.sizes = data, data.sizes

    def collate(self, indices) -> dict:
        batch = self.data.collate(indices)
        shifted = self.data.collate([(int(i) + 1) % len(self.sizes) for i in indices])
        batch["src"] = shifted["src"]
        if "src_lengths" in shifted:
            batch["src_lengths"] = shifted["src_lengths"]
        return batch


def source_blind_nll(model, data, recipe, device, max_tokens: int) -> float:
    """Validation NLL with every source moved to another sentence: a model that reads its input does much worse
    here than on the true pairs, one that ignores it scores the same."""
    return validate(model, ShiftedSources(data), recipe, device, max_tokens)


def describe_run(run_dir: Path) -> str | None:
    """What a run directory already holds, in words (None when it holds no run)."""
    status_path = run_dir / "status.json"
    if status_path.is_file():
        try:
            status = json.loads(status_path.read_text())
            return f"a {status['status']} run ({status['step']} updates)"
        except (ValueError, KeyError):
            return "a run whose status.json is unreadable"
    ckpts = checkpoint.resumable(run_dir)
    if ckpts:
        return f"an unfinished run, resumable from {ckpts[-1].name}"
    if (run_dir / "log.jsonl").is_file():
        return "a started run with no checkpoint yet"
    return None


def batches_per_forward(recipe, tokens_per_gpu: int | None, world: int) -> int:
    """How many of the recipe's batches (its `data.max_tokens`, the paper's per-GPU batch) one forward takes when a
    GPU takes `tokens_per_gpu` tokens at once: the update stays the recipe's (the same batches, the same sentences),
    only fewer, larger forwards make it. A ValueError names a value that does not divide."""
    if tokens_per_gpu is None:
        return 1
    per_batch, update_freq = batch_tokens(recipe), recipe.optim.gpus_per_update // max(world, 1)
    if tokens_per_gpu < per_batch or tokens_per_gpu % per_batch:
        raise ValueError(f"--tokens-per-gpu {tokens_per_gpu}: not a multiple of the recipe's batch of {per_batch} "
                         f"tokens (data.max_tokens)")
    m = tokens_per_gpu // per_batch
    if update_freq % m:
        raise ValueError(f"--tokens-per-gpu {tokens_per_gpu}: {m} batches per forward do not divide the {update_freq} "
                         f"batches each of {world} GPU(s) makes per update (optim.gpus_per_update "
                         f"{recipe.optim.gpus_per_update})")
    return m


def describe_batching(recipe, tokens_per_gpu: int | None, world: int) -> str:
    """The batch and the accumulation that make the recipe's update on `world` GPUs, in words."""
    m = batches_per_forward(recipe, tokens_per_gpu, world)
    per_batch, update_freq = batch_tokens(recipe), recipe.optim.gpus_per_update // max(world, 1)
    return (f"{per_batch * m:,} tokens per GPU per forward ({m} of the recipe's {per_batch:,}-token batches), "
            f"{update_freq // m} forwards accumulated per update on each of {world} GPU(s): "
            f"{per_batch * recipe.optim.gpus_per_update:,} tokens per update, the recipe's")


class TensorBoard:
    """`train --tensorboard`: every log row and validation also as TensorBoard scalars in run_dir/tb (the optional
    `tensorboard` package, `pip install -e '.[tb]'`); a resumed run drops the events after its checkpoint."""

    def __init__(self, run_dir: Path, step: int):
        check_tensorboard()
        from torch.utils.tensorboard import SummaryWriter
        # events after the checkpoint go (they are logged again); those of its own update stay: they are not
        self.writer = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=step + 1 if step else None)

    def row(self, row: dict) -> None:
        for key in ("loss", "nll", "grad_norm", "lr", "tokens_per_s", "valid_nll", "loss_scale"):
            if key in row:
                self.writer.add_scalar(key, row[key], row["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def check_tensorboard() -> None:
    """Refuse --tensorboard before any work where the package is missing (one line)."""
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        raise ValueError("--tensorboard needs the tensorboard package: pip install -e '.[tb]'") from None


class SingleEngine:
    """A standalone run's update (eager, or replayed as CUDA graphs), under DDP where there are several processes,
    with fp16's loss scaler where the recipe trains in fp16."""

    def __init__(self, model, optimizer, r, d: Dist, device, cuda_graphs: bool):
        self.model, self.optimizer, self.r, self.d, self.device = model, optimizer, r, d, device
        self.ddp_model = model
        if d.world > 1:
            self.ddp_model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[d.local_rank] if device.type == "cuda" else None)
        if r.train.compile:
            self.ddp_model = torch.compile(self.ddp_model)
        self.scaler = torch.amp.GradScaler(device.type) if r.train.precision == "fp16" else None
        self.graphed = GraphedUpdate(model, r, capture=device.type == "cuda") if cuda_graphs else None

    size = 1

    def _eager(self, group, collate) -> torch.Tensor:
        """Forward and backward over the update's batches, normalisation and clipping: [loss, NLL, target tokens,
        gradient norm] on the device, the gradients in .grad."""
        self.optimizer.zero_grad(set_to_none=True)
        # Loss, NLL and token sums stay on the device until the update's one host-device sync.
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        for j, idx in enumerate(group):
            batch = to_device(collate(idx), self.device)
            sync = (contextlib.nullcontext() if (self.d.world == 1 or j == len(group) - 1)
                    else self.ddp_model.no_sync())
            with sync:
                with autocast(self.device, self.r.train.precision):
                    loss, nll, ntok = batch_loss(self.ddp_model, batch, self.r)
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            sums[0] += loss.detach().double()
            sums[1] += nll.detach().double()
            sums[2] += ntok  # a host count: no copy to the device
        if self.d.world > 1:
            dist.all_reduce(sums)
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        # DDP averages gradients over ranks; the loss is a sum over tokens: normalise by all tokens.
        norm = normalise_and_clip(self.model.parameters(), sums[2], self.r.optim.clip_norm, self.d.world)
        return torch.cat([sums, norm.double().view(1)])

    def update(self, groups: list[list], lrs: list[float], collate) -> list[dict]:
        for g in self.optimizer.param_groups:
            g["lr"] = lrs[0]
        if self.graphed is not None:
            sums_norm = self.graphed(to_device(collate(idx), self.device) for idx in groups[0])
        else:
            sums_norm = self._eager(groups[0], collate)
        loss_sum, nll_sum, ntokens, grad_norm = sums_norm.tolist()  # the update's one host-device sync
        out = {"loss": loss_sum, "nll": nll_sum, "tokens": ntokens, "grad_norm": grad_norm, "skipped": False}
        if self.scaler:
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            # an overflow: the scaler skipped this step and lowered its scale
            out.update(skipped=self.scaler.get_scale() < scale, loss_scale=self.scaler.get_scale())
        elif math.isfinite(grad_norm):
            self.optimizer.step()
        return [out]

    def validate(self, data, max_tokens: int) -> list[float]:
        return [validate(self.model, data, self.r, self.device, max_tokens)]

    def member_state(self, g: int) -> tuple[dict, dict]:
        return self.model.state_dict(), self.optimizer.state_dict()

    def drop(self, keep: list[bool]) -> None:
        """A run that fails ends the loop: nothing to remove."""

    def counts(self) -> dict | None:
        return self.graphed.counts() if self.graphed else None


@dataclass
class Progress:
    """What changes as a member trains: the checkpoint it resumes from (settled in set-up), its place in its seed's
    batch order, its failure monitor, log window, how it ended and its stretches of training."""

    state: dict | None = None  # the checkpoint it resumes from
    newest: Path | None = None
    finished: dict | None = None  # a group member that had ended before this resume: its status
    health: HealthMonitor | None = None
    epoch: int = 1
    position: int = 0
    batches: list | None = None  # this epoch's batches
    window: dict | None = None
    last_valid: float | None = None
    failed: str | None = None
    stopped: str | None = None  # why a stop request ended it (`request_stop`)
    status: dict | None = None
    earlier: list | None = None  # the stretches before this one
    stretch_started: str = ""
    elapsed_before: float = 0.0
    tb: TensorBoard | None = None


@dataclass(frozen=True)
class Member:
    """One run in the loop, a standalone run or one member of a group: what is fixed once its directory is opened
    (its recipe, directory, what the directory held, whether a stop request there stands: a new run, --overwrite,
    drops it), and what changes as it trains (`now`)."""

    resolved: ResolvedRecipe
    run_dir: Path
    existing: str | None = None
    resuming: bool = False
    now: Progress = field(default_factory=Progress)

    @property
    def r(self):
        return self.resolved.recipe

    @property
    def log_path(self) -> Path:
        return self.run_dir / "log.jsonl"

    @property
    def status_path(self) -> Path:
        return self.run_dir / "status.json"

    def next_update(self, train_data, d: Dist, update_freq: int, merge: int, corpus_dir: Path) -> list:
        """The batches of this member's next update: its seed's order, epoch after epoch."""
        def epoch_batches():
            batches = rank_batches(token_batches(train_data.sizes, batch_tokens(self.r), self.r.train.seed,
                                                 self.now.epoch), d.rank, d.world, update_freq)
            if len(batches) // update_freq == 0:
                raise ValueError(f"{corpus_dir}: the training split gives fewer batches than one update needs "
                                 f"({d.world * update_freq}); lower optim.gpus_per_update or data.max_tokens")
            return batches
        if self.now.batches is None:
            self.now.batches = epoch_batches()
        if self.now.position >= len(self.now.batches) // update_freq:
            self.now.epoch, self.now.position = self.now.epoch + 1, 0
            self.now.batches = epoch_batches()
        group = self.now.batches[self.now.position * update_freq:(self.now.position + 1) * update_freq]
        self.now.position += 1
        if merge > 1:  # a GPU's larger batch: the same batches, `merge` of them per forward
            group = [np.concatenate(group[i:i + merge]) for i in range(0, len(group), merge)]
        return group

    def lr(self, step: int, warmup: bool) -> float:
        o = self.r.optim
        return inverse_sqrt_lr(step, o.lr, o.warmup_updates, o.warmup_init_lr, warmup=warmup,
                               decay_period=o.decay_period)


def open_member(resolved: ResolvedRecipe, run_dir: Path, resume: bool, overwrite: bool, allow_recipe_change: bool,
                main: bool) -> Member:
    """What a run directory holds and whether this command may use it; the checkpoint a resume starts from."""
    existing = describe_run(run_dir)
    if existing and not resume and not overwrite:
        raise RunDirError(f"{run_dir} already holds {existing}: continue it with --resume, or replace it with "
                          f"--overwrite")
    ckpts = checkpoint.resumable(run_dir) if resume else []
    # a damaged newest checkpoint is skipped, saying why: the run resumes from the newest intact one
    newest, state, skipped = checkpoint.newest_intact(ckpts)
    if ckpts and state is None:
        raise checkpoint.CheckpointError(f"{run_dir}: no intact checkpoint to resume from ({'; '.join(skipped)})")
    if skipped and main:
        for why in skipped:
            console.print(f"skipped: {why}", soft_wrap=True)
    if resume and not existing and main:
        console.print(f"--resume: {run_dir} holds no run to resume; starting a new one", markup=False,
                      highlight=False)
    if resume and state is None and (run_dir / "status.json").is_file():
        raise RunDirError(f"{run_dir} holds {existing} but no checkpoint to resume from: replace it with --overwrite")
    if state is not None and state.get("recipe_hash") != resolved.hash() and not allow_recipe_change:
        raise RunDirError(f"{run_dir}: its checkpoints were trained with recipe hash {state.get('recipe_hash')}, "
                          f"but {resolved.path} at scale {resolved.scale}"
                          f"{' with ' + ' '.join(resolved.overrides) if resolved.overrides else ''} resolves to "
                          f"{resolved.hash()}: resume with the same recipe and --set values, or pass "
                          f"--allow-recipe-change")
    return Member(resolved, Path(run_dir), existing, resume, Progress(state, newest))


def align_group(members: list[Member], resume: bool) -> None:
    """A group resumes every member from the same update. A member that had already ended (its status.json
    written) keeps its end. Of the others, one killed while the group wrote its checkpoints may be one
    checkpoint ahead: it goes back to the group's newest common update, whose checkpoint a group keeps until every
    member has written the next one (`checkpoint.prune` runs after all have)."""
    if resume:
        for m in members:
            if m.status_path.is_file():
                m.now.finished = json.loads(m.status_path.read_text())
    live = [m for m in members if m.now.finished is None]
    for m in live:  # progress made outside this group is never thrown away to align with it
        if m.now.state is not None and "group" not in m.now.state and len(live) > 1:
            raise RunDirError(f"{m.run_dir} holds a run trained alone (resumable from {m.now.newest.name}): a group "
                              f"starts its members together; resume it alone (lnrepro train ... --seed "
                              f"{m.r.train.seed} --run-dir {m.run_dir} --resume) or move it away first")
    steps = [m.now.state["step"] if m.now.state else 0 for m in live]
    common = min(steps, default=0)
    for m, s in zip(live, steps):
        if s == common:
            continue
        if common == 0:  # a member without any checkpoint: the whole group starts again
            m.now.state = m.now.newest = None
        else:
            m.now.newest = next((p for p in checkpoint.resumable(m.run_dir) if checkpoint.step_of(p) == common), None)
            if m.now.newest is None:
                held = ", ".join(p.name for p in checkpoint.resumable(m.run_dir))
                raise RunDirError(f"{m.run_dir}: the group's members meet at update {common}, but this member holds "
                                  f"no checkpoint of it ({held}): resume it alone, or start the group with --overwrite")
            m.now.state = checkpoint.load(m.now.newest)


def train_run(resolved: ResolvedRecipe, run_dir: Path, data_root: Path, resume: bool = False,
              overwrite: bool = False, allow_recipe_change: bool = False, cuda_graphs: bool = False,
              tokens_per_gpu: int | None = None, tensorboard: bool = False) -> dict:
    """Train one run. A directory holding a run is continued only with `resume` (and the same recipe unless
    `allow_recipe_change`) and replaced only with `overwrite`; it is locked while in use. `cuda_graphs`: replay
    each batch's forward and backward as a CUDA graph (repro/train/graphs.py). `tokens_per_gpu`: a GPU's batch,
    a multiple of the recipe's; the update stays the recipe's (`batches_per_forward`)."""
    return train_group([resolved], [run_dir], data_root, resume, overwrite, allow_recipe_change, cuda_graphs,
                       tokens_per_gpu, tensorboard)[0]


def train_group(recipes: list[ResolvedRecipe], run_dirs: list[Path], data_root: Path, resume: bool = False,
                overwrite: bool = False, allow_recipe_change: bool = False, cuda_graphs: bool = False,
                tokens_per_gpu: int | None = None, tensorboard: bool = False, on_finish=None) -> list[dict]:
    """Train runs together: one run alone (`train_run`), or several seeds of one recipe as one stacked model
    (repro/train/group.py). Returns each run's status; `on_finish(i, status)` is called as run i ends (a group
    member that fails ends before the others)."""
    run_dirs = [Path(p) for p in run_dirs]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    batches_per_forward(recipes[0].recipe, tokens_per_gpu, world)  # refuse early
    if len(recipes) > 1:
        check_group(recipes, world, cuda_graphs)
        if len(set(d.resolve() for d in run_dirs)) < len(run_dirs):
            raise RunDirError("grouped training: two members share a run directory")
    if tensorboard:
        check_tensorboard()
    if cuda_graphs:  # before the run directory is touched
        check_graphable(recipes[0].recipe, "cuda" if torch.cuda.is_available() else "cpu", world)
    args = (recipes, run_dirs, data_root, resume, overwrite, allow_recipe_change, cuda_graphs, tokens_per_gpu,
            tensorboard, on_finish)
    if int(os.environ.get("RANK", "0")) != 0:
        return _train(*args)
    with contextlib.ExitStack() as locks:
        for run_dir in run_dirs:
            locks.enter_context(run_lock(run_dir))
        return _train(*args)


def _train(recipes: list[ResolvedRecipe], run_dirs: list[Path], data_root: Path, resume: bool, overwrite: bool,
           allow_recipe_change: bool, cuda_graphs: bool, tokens_per_gpu: int | None, tensorboard: bool,
           on_finish) -> list[dict]:
    main = int(os.environ.get("RANK", "0")) == 0
    members = [open_member(res, run_dir, resume, overwrite, allow_recipe_change, main)
               for res, run_dir in zip(recipes, run_dirs)]
    if len(members) > 1:
        align_group(members, resume)
    elif resume and members[0].status_path.is_file():
        # a run that has ended (at max_updates, on failure, or at a stop request) is not trained further by a
        # resume: its end stands. Its last checkpoint damaged, it trains again from the newest intact one up to that
        # end; a changed recipe (--allow-recipe-change) continues it
        m = members[0]
        ended = json.loads(m.status_path.read_text())
        if (ended.get("status") in ("completed", "failed") and m.now.state is not None
                and m.now.state.get("step") == ended.get("step") and m.now.state.get("recipe_hash") == m.resolved.hash()):
            return [ended]
    training = Training(members, data_root, cuda_graphs, tokens_per_gpu, tensorboard, on_finish)
    return training.run()


class Engine(Protocol):
    """What the loop asks of a standalone run's engine (SingleEngine) and a group's (GroupEngine): member g of
    `size` members."""

    size: int

    def update(self, groups: list[list], lrs: list[float], collate) -> list[dict]: ...

    def validate(self, data, max_tokens: int) -> list[float]: ...

    def member_state(self, g: int) -> tuple[dict, dict]: ...

    def drop(self, keep: list[bool]) -> None: ...

    def counts(self) -> dict | None: ...


class Training:
    """One training of a run alone or of a group's members, in phases: set-up (`__init__`: data, models, engine and
    the random state a resume restores), then per update `step`, `validate`, `ask_stops` and `checkpoint`, and at
    the end `finish_all`. A member that ends early (a failure, a stop request) leaves the group at its update
    (`drop_ended`), and its status is written once the others have checkpointed there (`end_members`)."""

    def __init__(self, members: list[Member], data_root: Path, cuda_graphs: bool, tokens_per_gpu: int | None,
                 tensorboard: bool, on_finish):
        self.members, self.on_finish = members, on_finish
        self.live = [m for m in members if m.now.finished is None]
        r = self.r = members[0].r
        d = self.d = setup_distributed()
        self.device = torch.device(f"cuda:{d.local_rank}" if torch.cuda.is_available() else "cpu")
        if self.device.type == "cpu":
            keep_freed_memory()
        self.corpus_dir = Path(data_root) / r.data.corpus
        meta = read_meta(self.corpus_dir)
        self.train_data = open_split(r, self.corpus_dir, r.data.train_split, train=True)
        self.valid_data = open_split(r, self.corpus_dir, r.data.valid_split)
        if r.optim.gpus_per_update % d.world:
            raise ValueError(f"optim.gpus_per_update {r.optim.gpus_per_update} is not a multiple of the "
                             f"{d.world} processes")
        self.update_freq = r.optim.gpus_per_update // d.world
        self.merge = batches_per_forward(r, tokens_per_gpu, d.world)
        # the members that train together now (one that ended before is no longer of the group; one left alone is
        # none)
        self.group = ({"runs": [str(m.run_dir) for m in self.live], "seeds": [m.r.train.seed for m in self.live]}
                      if len(self.live) > 1 else None)
        self.engine = self._engine(meta, cuda_graphs)
        resumed = next((m.now.state for m in self.live if m.now.state is not None), None)
        self.step = resumed["step"] if resumed else 0
        if resumed:  # a group's members hold the same random state: the group's
            torch.set_rng_state(resumed["rng"]["torch"])
            random.setstate(resumed["rng"]["python"])
            if torch.cuda.is_available() and resumed["rng"].get("cuda") is not None:
                torch.cuda.set_rng_state(resumed["rng"]["cuda"])
        for m in self.live:
            # a member that ended at a stop request and was killed before its status: it ends here again, as it did
            m.now.stopped = m.now.state.get("stopped") if m.now.state else None
            m.now.window = {**new_window(), **(m.now.state.get("window", {}) if m.now.state else {})}
            m.now.state = None  # loaded: free it
            m.now.tb = TensorBoard(m.run_dir, self.step) if tensorboard and d.main else None
        self.t0, self.c0 = time.time(), time.process_time()
        self.from_update = self.step
        self.saved_at = time.time()
        self.active, self.ended = list(self.live), []

    def _engine(self, meta: dict, cuda_graphs: bool) -> Engine | None:
        """Each member's directory and model, as its standalone run makes them, and the engine that updates them."""
        models = []
        for m in self.live:
            prepare_member(m, self.d, meta, self.update_freq, self.merge, self.group)
            models.append(build_member(m, meta, self.train_data, self.device, self.d))
        self.warmup = models[0].variant.warmup if models else True
        r = self.r
        if len(self.members) == 1:
            optimizer = make_optimizer(models[0].parameters(), r.optim.lr, r.optim.betas, r.optim.eps,
                                       r.optim.weight_decay)
            if self.live[0].now.state is not None:
                load_optimizer_state(optimizer, self.live[0].now.state["optimizer"])
            return SingleEngine(models[0], optimizer, r, self.d, self.device, cuda_graphs)
        if self.live:
            return GroupEngine(models, [m.now.state and m.now.state["optimizer"] for m in self.live],
                               [m.resolved for m in self.live], self.device)
        return None

    # -- what the phases write ------------------------------------------------------------------------------
    def segments(self, m: Member) -> list[dict]:
        this = {"started": m.now.stretch_started, "commit": m.now.status["commit"], "model_code": m.now.status["model_code"],
                "hardware": m.now.status["hardware"], "from_update": self.from_update, "to_update": self.step,
                "duration_s": round(time.time() - self.t0, 1), "cpu_s": round(time.process_time() - self.c0, 1),
                **({"group_size": len(self.live)} if self.group else {}),
                **({"cuda_graphs": self.engine.counts()} if self.engine.counts() else {})}
        return m.now.earlier + [this]

    def save_checkpoints(self, runs: list[Member], kind: str = "checkpoint", prune: bool = True) -> None:
        """Every member's checkpoint of this update: a save_interval one, or (`kind` "resume") one on wall time or
        at a member's end."""
        self.saved_at = time.time()
        if not self.d.main:
            return
        rng = {"torch": torch.get_rng_state(), "python": random.getstate(),
               "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}
        for m in runs:
            model_state, optimizer_state = self.engine.member_state(self.active.index(m))
            state = {"model": model_state, "optimizer": optimizer_state, "step": self.step, "epoch": m.now.epoch,
                     "position": m.now.position, "elapsed": m.now.elapsed_before + time.time() - self.t0,
                     "health": m.now.health.state_dict(), "segments": self.segments(m), "rng": rng,
                     "recipe_hash": m.resolved.hash(), **({"group": m.now.status["group"]} if "group" in m.now.status else {}),
                     "window": {k: v for k, v in m.now.window.items() if k != "time"},  # sums toward the next log line
                     **({"stopped": m.now.stopped} if m.now.stopped else {})}  # its end, should the status not follow
            checkpoint.save(state, m.run_dir, self.step, keep_last=None, kind=kind)
        if prune:
            self.prune_all(runs)

    def prune_all(self, runs: list[Member]) -> None:
        if self.d.main:  # only once every member has this update's checkpoint (align_group)
            for m in runs:
                checkpoint.prune(m.run_dir, m.r.train.keep_last)

    def finish(self, m: Member) -> None:
        """Write the member's status.json: the run has ended (completed, or failed)."""
        m.now.status.update({"status": "failed" if m.now.failed else "completed", "reason": m.now.failed or m.now.stopped or "",
                         "step": self.step, "finished": now(),
                         "duration_s": round(m.now.elapsed_before + time.time() - self.t0, 1),
                         "recipe": str(m.resolved.path), "recipe_hash": m.resolved.hash(),
                         "scale": m.resolved.scale, "overrides": m.resolved.overrides, "seed": m.r.train.seed,
                         "segments": self.segments(m)})
        if m.now.tb:
            m.now.tb.close()
        if self.d.main:
            atomic_write_text(m.status_path, json.dumps(m.now.status, indent=2) + "\n")
        if self.on_finish is not None:
            self.on_finish(self.members.index(m), m.now.status)

    def log(self, m: Member, row: dict) -> None:
        if self.d.main:
            append_jsonl(m.log_path, row)
            if m.now.tb:
                m.now.tb.row(row)

    # -- members that end early ----------------------------------------------------------------------------
    def drop_ended(self) -> None:
        """Members that failed, or were asked to stop, leave the group here; the others train on. Their status is
        written at the end of the update (`end_members`), after the others' checkpoints."""
        keep = [m.now.failed is None and m.now.stopped is None for m in self.active]
        if all(keep):
            return
        gone = [m for m, k in zip(self.active, keep) if not k]
        stopped = [m for m in gone if m.now.failed is None]
        if stopped:  # its last update's weights, as a run at its end keeps them
            self.save_checkpoints(stopped, prune=False)
        self.ended.extend(gone)
        self.engine.drop(keep)
        self.active = [m for m, k in zip(self.active, keep) if k]

    def end_members(self) -> None:
        """The members that ended at this update: the others checkpoint here first, so that a kill at any point
        resumes the group as it trained on. Killed before that, the group resumes from its last common checkpoint
        with the ended members, which end again as they did; killed after, from this update without them."""
        if self.active:
            self.save_checkpoints(self.active, "checkpoint" if self.step % self.r.train.save_interval == 0
                                  else "resume", prune=False)
        for m in self.ended:
            self.finish(m)
        self.prune_all(self.active + self.ended)
        self.ended.clear()

    # -- the phases of an update ---------------------------------------------------------------------------
    def train_step(self) -> None:
        """One update of every member, and its log rows."""
        groups = [m.next_update(self.train_data, self.d, self.update_freq, self.merge, self.corpus_dir)
                  for m in self.active]
        lrs = [m.lr(self.step, self.warmup) for m in self.active]
        results = self.engine.update(groups, lrs, self.train_data.collate)
        self.step += 1
        for m, res, lr in zip(self.active, results, lrs):
            take_update(m, res, self.step, lr, self.t0, self.log)

    def validate(self) -> None:
        for m, v in zip(self.active, self.engine.validate(self.valid_data, batch_tokens(self.r))):
            m.now.last_valid = v
            self.log(m, {"step": self.step, "valid_nll": v})
            m.now.failed = m.now.health.check_valid(self.step, v)

    def ask_stops(self) -> None:
        """Stop requests, read at a log line or a validation (at most log_interval updates late)."""
        for m in self.active:
            asked = stop_reason(m.run_dir, self.d, self.device)  # on every process: it may all-reduce
            m.now.stopped = None if m.now.failed else asked

    def checkpoint(self) -> None:
        """The update's checkpoint, if any: at a member's end, at save_interval, or on wall time at a log line."""
        r = self.r
        if self.ended:
            self.end_members()
        elif self.active and self.step % r.train.save_interval == 0:
            self.save_checkpoints(self.active)
        elif (self.active and self.step % r.train.log_interval == 0
              and wall_clock_due(self.saved_at, self.d, self.device)):
            self.save_checkpoints(self.active, kind="resume")  # at a log line: every process asks at the same update

    def run(self) -> list[dict]:
        r, members = self.r, self.members
        self.drop_ended()  # a member resumed at its end (see __init__)
        if self.ended:
            self.end_members()
        interrupted = None
        title = f"train {members[0].resolved.name}" + (
            f" seeds {','.join(map(str, self.group['seeds']))}" if self.group else "")
        with progress_bar(title, r.optim.max_updates) as bar, StopRequest() as stop:
            bar.advance(self.step)
            while self.active and self.step < r.optim.max_updates:
                self.train_step()
                bar.advance(1)
                if self.d.main and self.step % r.train.log_interval == 0:
                    bar.update(status=bar_status(self.active[0].now.window["last"], self.active[0].now.last_valid) +
                               (f" ({len(self.active)} of {len(members)} training)" if self.group else ""))
                self.drop_ended()
                at_validation = self.step % r.train.validate_interval == 0
                if self.active and at_validation:
                    self.validate()
                if self.active and (at_validation or self.step % r.train.log_interval == 0):
                    self.ask_stops()
                    self.drop_ended()
                self.checkpoint()
                if self.active and stop.requested(self.d.world, self.device):
                    interrupted = stop.name
                    break
        self.finish_all(interrupted)
        if self.d.world > 1:
            dist.barrier()
        return [m.now.finished if m.now.finished is not None else m.now.status for m in members]

    def finish_all(self, interrupted: str | None) -> None:
        """The end: a stopped process checkpoints to resume from; a finished training validates its last update
        (unless it just did), checkpoints it and writes every member's status."""
        r = self.r
        if interrupted:
            if self.step % r.train.save_interval:  # to resume from, never averaged
                self.save_checkpoints(self.active, kind="resume")
            for m in self.active:
                if m.now.tb:
                    m.now.tb.close()
                # no status.json: the run directory reads as unfinished, resumable from the checkpoint just written
                m.now.status.update({"status": "interrupted", "reason": f"{interrupted} at update {self.step}",
                                 "step": self.step})
            return
        # (a resumed run that had already ended validated this update then: its log keeps that row)
        need = [self.step % r.train.validate_interval and not validated_in_log(m.log_path, self.step)
                for m in self.active]
        if any(need):
            for m, v, n in zip(self.active, self.engine.validate(self.valid_data, batch_tokens(r)), need):
                if n:
                    self.log(m, {"step": self.step, "valid_nll": v})
                    m.now.failed = m.now.health.check_valid(self.step, v)
        done = [m for m in self.active if m.now.failed is None]
        if done and self.step % r.train.save_interval:
            self.save_checkpoints(done)
        for m in self.active:
            self.finish(m)


def new_window() -> dict:
    """Sums over the updates since the last log line."""
    return {"loss": 0.0, "nll": 0.0, "tokens": 0, "updates": 0, "time": time.time(), "grad_norm": 0.0, "skipped": 0,
            "last": None}


def take_update(m: Member, res: dict, step: int, lr: float, t0: float, log) -> None:
    """One update's results for a member: its window sums, the failure rule, and a log row every log_interval."""
    w = m.now.window
    w["loss"] += res["loss"]
    w["nll"] += res["nll"]
    w["tokens"] += res["tokens"]
    w["updates"] += 1
    w["grad_norm"] += res["grad_norm"]
    if res["skipped"]:
        w["skipped"] += 1
        m.now.status["fp16_skipped_steps"] = m.now.status.get("fp16_skipped_steps", 0) + 1
    loss_now = res["loss"] / max(res["tokens"], 1)
    if not math.isfinite(loss_now):
        m.now.failed = f"loss became {loss_now} at update {step}"
    elif not math.isfinite(res["grad_norm"]) and "loss_scale" not in res:  # fp16 skips such steps by design
        m.now.failed = f"gradient norm became {res['grad_norm']} at update {step}"
    if step % m.r.train.log_interval == 0 or m.now.failed:
        dt = time.time() - w["time"]
        row = {"step": step, "epoch": m.now.epoch, "lr": lr, "loss": w["loss"] / max(w["tokens"], 1),
               "nll": w["nll"] / max(w["tokens"], 1), "grad_norm": w["grad_norm"] / w["updates"],
               "tokens_per_s": w["tokens"] / max(dt, 1e-9), "time": time.time() - t0 + m.now.elapsed_before,
               **({"fp16_skipped": w["skipped"], "loss_scale": res["loss_scale"]} if "loss_scale" in res else {})}
        m.now.failed = m.now.failed or m.now.health.check(step, row["loss"])
        log(m, row)
        m.now.window = new_window()
        m.now.window["last"] = row


def prepare_member(m: Member, d: Dist, meta: dict, update_freq: int, merge: int, group: dict | None) -> None:
    """The member's directory (a stale start cleared, the resolved recipe written), failure monitor, status and
    place in its batch order."""
    r = m.r
    variant_warms = get_variant(r.model.variant).warmup
    m.now.health = HealthMonitor(r.optim.warmup_updates if variant_warms else 0,
                             effective_window(r.train.divergence_window, r.optim.max_updates, r.train.log_interval),
                             vocab_size=meta["vocab_size"])
    if d.main:
        m.run_dir.mkdir(parents=True, exist_ok=True)
        if m.existing and m.now.state is None:  # --overwrite, or a start that never checkpointed: cleared only now
            # that data and model are ready
            for stale in [m.log_path, m.status_path, m.run_dir / "admin_profile.json",
                          *([] if m.resuming else [m.run_dir / STOP_FILE]), *checkpoint.resumable(m.run_dir)]:
                stale.unlink(missing_ok=True)
                Path(f"{stale}.sha256").unlink(missing_ok=True)
        (m.run_dir / "recipe.yaml").write_text(f"# {m.resolved.path} at scale {m.resolved.scale}\n" + dump_yaml(r))
    m.now.status = {"status": "running", "reason": "", "step": 0, "started": now(), "commit": git_commit(),
                "model_code": model_code.current(r.model.variant),
                "hardware": hardware(d.world), "update_freq": update_freq,
                "data": corpus_fingerprint(r.data.corpus, meta),
                "batching": {"tokens_per_gpu": batch_tokens(r) * merge, "batches_per_forward": merge,
                             "forwards_per_update": update_freq // merge},
                **({"group": group} if group else {})}
    m.now.stretch_started = m.now.status["started"]
    # A run resumed on another day, commit or machine keeps one entry per stretch of training, so its record says
    # where every update was made and at what pace (its seconds, and its hardware with the CPU threads); the first
    # entry's start is the run's. The process's CPU seconds (all its threads) tell whether the stretch had its
    # threads' cores to itself or shared them with other work, which slows it. A group's stretch is the group's.
    m.now.earlier = m.now.state.get("segments", []) if m.now.state is not None else []
    if m.now.earlier:
        m.now.status["started"] = m.now.earlier[0]["started"]
    if m.now.state is not None:
        m.now.epoch, m.now.position = m.now.state["epoch"], m.now.state["position"]
        m.now.elapsed_before = m.now.state.get("elapsed", 0.0)
        m.now.health.load_state_dict(m.now.state["health"])
        if d.main:
            truncate_log(m.log_path, m.now.state["step"])
            console.print(f"resumed from {m.now.newest.name} (update {m.now.state['step']})" +
                          (f" in {m.run_dir}" if group else ""), markup=False, highlight=False)


def build_member(m: Member, meta: dict, train_data, device, d: Dist):
    """The member's model as its standalone run builds it: seeded, initialised, Admin's profile, the checkpoint."""
    r, seed = m.r, m.r.train.seed
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    model = build_model(r, meta["vocab_size"], PAD).to(device)
    # Admin: one profiling pass, done once by rank 0 and saved beside the run; every process (and every later
    # resume) loads the saved profile instead of profiling again.
    if model.variant.residual == "admin_omega":
        profile_path = m.run_dir / "admin_profile.json"
        if d.main and not profile_path.is_file():
            first = token_batches(train_data.sizes, batch_tokens(r), seed, 1)[0]
            batch = to_device(train_data.collate(first), device)
            save_admin_profile(admin_profile(model, lambda: batch_loss(model, batch, r)), profile_path)
        if d.world > 1:
            dist.barrier()
        load_admin_profile(model, profile_path)
    if m.now.state is not None:
        model.load_state_dict(m.now.state["model"])
    return model
