"""Member-updates per second of grouped training (repro/train/group.py) against standalone runs.

    python benchmarks/group_step.py [--recipe recipes/6L-6L-post_ln.yaml] [--groups 1,4,16,64] [--steps 10]
                                    [--threads 2] [--standalone] [--out FILE]

First one standalone run's update (the loop's SingleEngine, the path `lnrepro train` without --seeds takes), then
for each size G a group of G members training G seeds of the recipe at scale mini on the prepared Multi30k corpus:
each timed update takes each member's own next batch (its seed's order), as `lnrepro train --seeds` does, through
GroupEngine.update (stacked forward and backward under vmap, per-member clipping, the stacked Adam). --standalone
times the standalone update alone. Reports member-updates per second (updates x members / seconds, after 2 warm-up
updates), peak memory (CUDA's allocator on a GPU, the process's resident set on a CPU: the largest so far), and
what the recipe's depth takes of a 5-seed Table 1 (its 3 cells x 5 seeds x the recipe's updates) at the best
rate measured, one JSON row per size. `lnrepro reproduce --plan` reads the gain of a group over the standalone
update from these files (repro.pace.group_gain).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from common import machine, peak_rss_mb, write_json
from repro.config import resolve
from repro.data.batching import token_batches
from repro.data.text import PAD, read_meta
from repro.model.build import build_model
from repro.model.cpu_paths import keep_freed_memory
from repro.train.group import GroupEngine
from repro.train.loop import Dist, SingleEngine
from repro.train.optim import make_optimizer
from repro.train.tasks import batch_tokens, open_split


def updates_of(data, r, seeds: list[int], count: int) -> list[list[list]]:
    """For each of `count` updates, each member's batch list (the recipe's gpus_per_update batches per update)."""
    k = r.optim.gpus_per_update
    orders = {s: token_batches(data.sizes, batch_tokens(r), s, 1) for s in seeds}
    return [[orders[s][u * k:(u + 1) * k] for s in seeds] for u in range(count)]


def time_updates(engine, updates, collate, device) -> float:
    lrs = [5e-4] * len(updates[0])
    for groups in updates[:2]:
        engine.update(groups, lrs, collate)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for groups in updates[2:]:
        engine.update(groups, lrs, collate)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="recipes/6L-6L-post_ln.yaml")
    ap.add_argument("--root", type=Path, default=Path("data"))
    ap.add_argument("--groups", default="1,4,16,64")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        keep_freed_memory()
    res = resolve(args.recipe, "mini")
    r = res.recipe
    corpus = args.root / r.data.corpus
    data = open_split(r, corpus, r.data.train_split, train=True)
    vocab = read_meta(corpus)["vocab_size"]
    rows = []
    sizes = [0] + ([] if args.standalone else [int(g) for g in args.groups.split(",")])  # 0: standalone
    for size in sizes:
        alone, size = size == 0, max(size, 1)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        seeds = list(range(1, size + 1))
        models = []
        for s in seeds:
            torch.manual_seed(s)
            models.append(build_model(r, vocab, PAD).to(device))
        if alone:
            opt = make_optimizer(models[0].parameters(), r.optim.lr, r.optim.betas, r.optim.eps, r.optim.weight_decay)
            engine = SingleEngine(models[0], opt, r, Dist(), device, cuda_graphs=False)
        else:
            engine = GroupEngine(models, [None] * size, [res] * size, device)
        del models
        updates = updates_of(data, r, seeds, args.steps + 2)
        seconds = time_updates(engine, updates, data.collate, device)
        rate = args.steps * size / seconds
        peak = torch.cuda.max_memory_allocated() / 2 ** 20 if device.type == "cuda" else peak_rss_mb()
        row = {"recipe": args.recipe, "mode": "standalone" if alone else "group", "group": size,
               "threads": torch.get_num_threads(), "device": device.type, "steps": args.steps,
               "member_updates_per_s": round(rate, 3), "peak_memory_mb": round(peak)}
        print(row, flush=True)
        rows.append(row)
        del engine
    best = max(rows, key=lambda row: row["member_updates_per_s"])
    minutes = 3 * 5 * r.optim.max_updates / best["member_updates_per_s"] / 60
    print(f"a 5-seed Table 1's 3 cells at this depth ({3 * 5 * r.optim.max_updates:,} member-updates): "
          f"{minutes:.0f} min at the best rate measured ({best['mode']}, {best['group']})")
    if args.out:
        write_json(args.out, {"machine": machine(), "rows": rows, "table1_5_seeds_this_depth_min": round(minutes, 1)})


if __name__ == "__main__":
    main()
