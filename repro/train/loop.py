"""The training run: setup, train, cleanup (DESIGN section 5).

A run directory holds recipe.yaml (resolved), log.jsonl, checkpoint_<update>.pt (last N), status.json and, for
Admin, admin_profile.json. Under `torchrun` every rank runs this; rank 0 writes files. Gradients are accumulated
over update_freq = gpus_per_update / world_size batches, so tokens per update match the paper's GPU count.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import threading
import time
from dataclasses import dataclass
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
from repro.progress import console, progress_bar
from repro.results import atomic_write_text, corpus_fingerprint, git_commit, hardware, now
from repro.train import checkpoint
from repro.train.graphs import GraphedUpdate, check_graphable
from repro.train.health import HealthMonitor, effective_window
from repro.train.lock import RunDirError, run_lock
from repro.train.optim import inverse_sqrt_lr, load_optimizer_state, make_optimizer, normalise_and_clip
from repro.train.tasks import batch_loss, batch_tokens, open_split, to_device


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
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if world > 1:
        return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    return Dist()


def autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


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


def validated_in_log(path: Path, step: int) -> bool:
    """Whether the log already holds a validation of this update."""
    if not path.is_file():
        return False
    for line in reversed(path.read_text(encoding="utf-8").splitlines()[-50:]):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("step") == step and "valid_nll" in row:
            return True
    return False


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
    ckpts = checkpoint.list_checkpoints(run_dir)
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
        self.writer = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=step or None)

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


def train_run(resolved: ResolvedRecipe, run_dir: Path, data_root: Path, resume: bool = False,
              overwrite: bool = False, allow_recipe_change: bool = False, cuda_graphs: bool = False,
              tokens_per_gpu: int | None = None, tensorboard: bool = False) -> dict:
    """Train one run. A directory holding a run is continued only with `resume` (and the same recipe unless
    `allow_recipe_change`) and replaced only with `overwrite`; it is locked while in use. `cuda_graphs`: replay
    each batch's forward and backward as a CUDA graph (repro/train/graphs.py). `tokens_per_gpu`: a GPU's batch,
    a multiple of the recipe's; the update stays the recipe's (`batches_per_forward`)."""
    run_dir = Path(run_dir)
    batches_per_forward(resolved.recipe, tokens_per_gpu, int(os.environ.get("WORLD_SIZE", "1")))  # refuse early
    if tensorboard:
        check_tensorboard()
    if cuda_graphs:  # before the run directory is touched
        check_graphable(resolved.recipe, "cuda" if torch.cuda.is_available() else "cpu",
                        int(os.environ.get("WORLD_SIZE", "1")))
    if int(os.environ.get("RANK", "0")) != 0:
        return _train(resolved, run_dir, data_root, resume, overwrite, allow_recipe_change, cuda_graphs,
                      tokens_per_gpu)
    with run_lock(run_dir):
        return _train(resolved, run_dir, data_root, resume, overwrite, allow_recipe_change, cuda_graphs,
                      tokens_per_gpu, tensorboard)


def _train(resolved: ResolvedRecipe, run_dir: Path, data_root: Path, resume: bool, overwrite: bool,
           allow_recipe_change: bool, cuda_graphs: bool, tokens_per_gpu: int | None = None,
           tensorboard: bool = False) -> dict:
    r = resolved.recipe
    existing = describe_run(run_dir)
    if existing and not resume and not overwrite:
        raise RunDirError(f"{run_dir} already holds {existing}: continue it with --resume, or replace it with "
                          f"--overwrite")
    ckpts = checkpoint.list_checkpoints(run_dir) if resume else []
    # a damaged newest checkpoint is skipped, saying why: the run resumes from the newest intact one
    newest, state, skipped = checkpoint.newest_intact(ckpts)
    if ckpts and state is None:
        raise checkpoint.CheckpointError(f"{run_dir}: no intact checkpoint to resume from ({'; '.join(skipped)})")
    if skipped and int(os.environ.get("RANK", "0")) == 0:
        for why in skipped:
            console.print(f"skipped: {why}", soft_wrap=True)
    if resume and not existing and int(os.environ.get("RANK", "0")) == 0:
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
    d = setup_distributed()
    device = torch.device(f"cuda:{d.local_rank}" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        keep_freed_memory()
    corpus_dir = Path(data_root) / r.data.corpus
    meta = read_meta(corpus_dir)
    train_data = open_split(r, corpus_dir, r.data.train_split, train=True)
    valid_data = open_split(r, corpus_dir, r.data.valid_split)

    seed = r.train.seed
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    model = build_model(r, meta["vocab_size"], PAD).to(device)
    optimizer = make_optimizer(model.parameters(), r.optim.lr, r.optim.betas, r.optim.eps, r.optim.weight_decay)
    if r.optim.gpus_per_update % d.world:
        raise ValueError(f"optim.gpus_per_update {r.optim.gpus_per_update} is not a multiple of the "
                         f"{d.world} processes")
    update_freq = r.optim.gpus_per_update // d.world
    merge = batches_per_forward(r, tokens_per_gpu, d.world)
    health = HealthMonitor(r.optim.warmup_updates if model.variant.warmup else 0,
                           effective_window(r.train.divergence_window, r.optim.max_updates,
                                            r.train.log_interval), vocab_size=meta["vocab_size"])
    log_path, status_path = run_dir / "log.jsonl", run_dir / "status.json"
    step, epoch, position, elapsed_before = 0, 1, 0, 0.0
    if d.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if existing and state is None:  # --overwrite, or a start that never checkpointed: cleared only now that
            # data and model are ready
            for stale in [log_path, status_path, run_dir / "admin_profile.json", *checkpoint.list_checkpoints(run_dir)]:
                stale.unlink(missing_ok=True)
                Path(f"{stale}.sha256").unlink(missing_ok=True)
        (run_dir / "recipe.yaml").write_text(f"# {resolved.path} at scale {resolved.scale}\n" + dump_yaml(r))

    # Admin: one profiling pass, done once by rank 0 and saved beside the run; every process (and every later
    # resume) loads the saved profile instead of profiling again.
    if model.variant.residual == "admin_omega":
        profile_path = run_dir / "admin_profile.json"
        if d.main and not profile_path.is_file():
            first = token_batches(train_data.sizes, batch_tokens(r), seed, 1)[0]
            batch = to_device(train_data.collate(first), device)
            save_admin_profile(admin_profile(model, lambda: batch_loss(model, batch, r)), profile_path)
        if d.world > 1:
            dist.barrier()
        load_admin_profile(model, profile_path)

    if state is not None:
        model.load_state_dict(state["model"])
        load_optimizer_state(optimizer, state["optimizer"])
        step, epoch, position = state["step"], state["epoch"], state["position"]
        elapsed_before = state.get("elapsed", 0.0)
        health.load_state_dict(state["health"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        if torch.cuda.is_available() and state["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(state["rng"]["cuda"])
        if d.main:
            truncate_log(log_path, step)
            console.print(f"resumed from {newest.name} (update {step})")

    ddp_model = model
    if d.world > 1:
        ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[d.local_rank] if device.type == "cuda" else None)
    if r.train.compile:
        ddp_model = torch.compile(ddp_model)
    scaler = torch.amp.GradScaler(device.type) if r.train.precision == "fp16" else None
    graphed = GraphedUpdate(model, r, capture=device.type == "cuda") if cuda_graphs else None

    def save_checkpoint():
        if not d.main:
            return
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "epoch": epoch,
                 "position": position, "elapsed": elapsed_before + time.time() - t0, "health": health.state_dict(),
                 "segments": segments(),
                 "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                         "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None},
                 "recipe_hash": resolved.hash()}
        checkpoint.save(state, run_dir, step, r.train.keep_last)

    status = {"status": "running", "reason": "", "step": step, "started": now(), "commit": git_commit(),
              "hardware": hardware(d.world), "update_freq": update_freq, "data": corpus_fingerprint(r.data.corpus, meta),
              "batching": {"tokens_per_gpu": batch_tokens(r) * merge, "batches_per_forward": merge,
                           "forwards_per_update": update_freq // merge}}
    # A run resumed on another day, commit or machine keeps one entry per stretch of training, so its record says
    # where every update was made and at what pace (its seconds, and its hardware with the CPU threads); the first
    # entry's start is the run's. The process's CPU seconds (all its threads) tell whether the stretch had its
    # threads' cores to itself or shared them with other work, which slows it.
    earlier = state.get("segments", []) if state is not None else []
    this_segment = {"started": status["started"], "commit": status["commit"], "hardware": status["hardware"],
                    "from_update": step}
    segments = lambda: earlier + [{**this_segment, "to_update": step, "duration_s": round(time.time() - t0, 1),
                                   "cpu_s": round(time.process_time() - c0, 1),
                                   **({"cuda_graphs": graphed.counts()} if graphed else {})}]
    if earlier:
        status["started"] = earlier[0]["started"]

    def eager_update(group) -> torch.Tensor:
        """Forward and backward over the update's batches, normalisation and clipping: [loss, NLL, target tokens,
        gradient norm] on the device, the gradients in .grad."""
        optimizer.zero_grad(set_to_none=True)
        # Loss, NLL and token sums stay on the device until the update's one host-device sync.
        sums = torch.zeros(3, dtype=torch.float64, device=device)
        for j, idx in enumerate(group):
            batch = to_device(train_data.collate(idx), device)
            sync = contextlib.nullcontext() if (d.world == 1 or j == len(group) - 1) else ddp_model.no_sync()
            with sync:
                with autocast(device, r.train.precision):
                    loss, nll, ntok = batch_loss(ddp_model, batch, r)
                (scaler.scale(loss) if scaler else loss).backward()
            sums[0] += loss.detach().double()
            sums[1] += nll.detach().double()
            sums[2] += ntok  # a host count: no copy to the device
        if d.world > 1:
            dist.all_reduce(sums)
        if scaler:
            scaler.unscale_(optimizer)
        # DDP averages gradients over ranks; the loss is a sum over tokens: normalise by all tokens.
        norm = normalise_and_clip(model.parameters(), sums[2], r.optim.clip_norm, d.world)
        return torch.cat([sums, norm.double().view(1)])

    t0, c0 = time.time(), time.process_time()
    new_window = lambda: {"loss": 0.0, "nll": 0.0, "tokens": 0, "updates": 0, "time": time.time(), "grad_norm": 0.0,
                          "skipped": 0}
    window = new_window()  # sums over the updates since the last log line
    last_valid = None
    failed = None
    interrupted = False
    tb = TensorBoard(run_dir, step) if tensorboard and d.main else None
    model.train()
    with progress_bar(f"train {resolved.name}", r.optim.max_updates) as bar, StopRequest() as stop:
        bar.advance(step)
        while step < r.optim.max_updates and failed is None and not interrupted:
            batches = rank_batches(token_batches(train_data.sizes, batch_tokens(r), seed, epoch),
                                   d.rank, d.world, update_freq)
            n_updates = len(batches) // update_freq
            if n_updates == 0:
                raise ValueError(f"{corpus_dir}: the training split gives fewer batches than one update needs "
                                 f"({d.world * update_freq}); lower optim.gpus_per_update or data.max_tokens")
            while position < n_updates and step < r.optim.max_updates:
                group = batches[position * update_freq:(position + 1) * update_freq]
                if merge > 1:  # a GPU's larger batch: the same batches, `merge` of them per forward
                    group = [np.concatenate(group[i:i + merge]) for i in range(0, len(group), merge)]
                lr = inverse_sqrt_lr(step, r.optim.lr, r.optim.warmup_updates, r.optim.warmup_init_lr,
                                     warmup=model.variant.warmup, decay_period=r.optim.decay_period)
                for g in optimizer.param_groups:
                    g["lr"] = lr
                if graphed is not None:
                    sums_norm = graphed(to_device(train_data.collate(idx), device) for idx in group)
                else:
                    sums_norm = eager_update(group)
                loss_sum, nll_sum, ntokens, grad_norm = sums_norm.tolist()  # the update's one host-device sync
                if scaler:
                    scale = scaler.get_scale()
                    scaler.step(optimizer)
                    scaler.update()
                    if scaler.get_scale() < scale:  # an overflow: the scaler skipped this step and lowered its scale
                        window["skipped"] += 1
                        status["fp16_skipped_steps"] = status.get("fp16_skipped_steps", 0) + 1
                elif math.isfinite(grad_norm):
                    optimizer.step()
                step += 1
                position += 1
                bar.advance(1)
                window["loss"] += loss_sum
                window["nll"] += nll_sum
                window["tokens"] += ntokens
                window["updates"] += 1
                window["grad_norm"] += grad_norm
                loss_now = loss_sum / max(ntokens, 1)
                if not math.isfinite(loss_now):
                    failed = f"loss became {loss_now} at update {step}"
                elif not math.isfinite(grad_norm) and scaler is None:  # fp16 skips such steps by design
                    failed = f"gradient norm became {grad_norm} at update {step}"
                if step % r.train.log_interval == 0 or failed:
                    dt = time.time() - window["time"]
                    row = {"step": step, "epoch": epoch, "lr": lr,
                           "loss": window["loss"] / max(window["tokens"], 1),
                           "nll": window["nll"] / max(window["tokens"], 1),
                           "grad_norm": window["grad_norm"] / window["updates"],
                           "tokens_per_s": window["tokens"] / max(dt, 1e-9), "time": time.time() - t0 + elapsed_before,
                           **({"fp16_skipped": window["skipped"], "loss_scale": scaler.get_scale()} if scaler else {})}
                    failed = failed or health.check(step, row["loss"])
                    if d.main:
                        append_jsonl(log_path, row)
                        bar.update(status=bar_status(row, last_valid))
                        if tb:
                            tb.row(row)
                    window = new_window()
                if failed:
                    break
                if step % r.train.validate_interval == 0:
                    v = last_valid = validate(model, valid_data, r, device, batch_tokens(r))
                    if d.main:
                        append_jsonl(log_path, {"step": step, "valid_nll": v})
                        if tb:
                            tb.row({"step": step, "valid_nll": v})
                    failed = health.check_valid(step, v)
                    if failed:
                        break
                if step % r.train.save_interval == 0:
                    save_checkpoint()
                if stop.requested(d.world, device):
                    interrupted = True
                    break
            if position >= n_updates:
                epoch, position = epoch + 1, 0

    if tb:
        tb.close()
    if interrupted:
        if step % r.train.save_interval:
            save_checkpoint()
        # no status.json: the run directory reads as unfinished, resumable from the checkpoint just written
        status.update({"status": "interrupted", "reason": f"{stop.name} at update {step}", "step": step})
        return status
    if failed is None and step % r.train.validate_interval and not validated_in_log(log_path, step):
        # (a resumed run that had already ended validated this update then: its log keeps that row)
        v = validate(model, valid_data, r, device, batch_tokens(r))
        if d.main:
            append_jsonl(log_path, {"step": step, "valid_nll": v})
        failed = health.check_valid(step, v)
    if failed is None:
        if step % r.train.save_interval:
            save_checkpoint()
    status.update({"status": "failed" if failed else "completed", "reason": failed or "", "step": step,
                   "finished": now(), "duration_s": round(elapsed_before + time.time() - t0, 1),
                   "recipe": str(resolved.path), "recipe_hash": resolved.hash(), "scale": resolved.scale,
                   "overrides": resolved.overrides,
                   "seed": seed, "segments": segments()})
    if d.main:
        tmp = status_path.with_name("status.json.tmp")
        tmp.write_text(json.dumps(status, indent=2) + "\n")
        tmp.replace(status_path)
    if d.world > 1:
        dist.barrier()
    return status
