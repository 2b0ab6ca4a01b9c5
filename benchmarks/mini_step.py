"""Training speed of the `mini` configuration on this machine's CPU: the real recipe, data, loss and optimizer.

    python benchmarks/mini_step.py [--recipe recipes/6L-6L-post_ln.yaml] [--steps 30] [--warmup 3] [--threads 1]
                                   [--profile] [--plain] [--numerics]
    python benchmarks/mini_step.py --against OTHER_CHECKOUT [--configs 6L-6L-post_ln:1:20 ...] [--rounds 3]
    python benchmarks/mini_step.py --layouts 1x2 2x1 [--recipe ...] [--steps 20] [--rounds 3]
    python benchmarks/mini_step.py --paces --configs gigaword/18L-18L-pre_ln:1:10 ... [--rounds 3]

Builds the recipe at scale mini (d 128, FFN 512, 2,048 tokens per batch) on the prepared Multi30k corpus
(`lnrepro prepare multi30k --source ../shared/data/multi30k`), runs the training step of repro/train/loop.py
(forward, label-smoothed loss, backward, clipping, Adam) on the first batches of epoch 1, and reports target tokens
per second over the timed steps (after --warmup steps, 3 by default), the process's CPU time per step (the
steadier figure while other work shares the cores) and its page faults per step. With --profile, the top operators
of torch's profiler. The step runs as training does, with the CPU paths (repro/model/cpu_paths.py: this processor's faster library for
the products, uniform-draw dropout, glibc keeping freed memory; the chunked output loss, repro/train/output_loss.py;
fused Adam); --plain runs torch's own layers, loss, Adam and allocator settings instead (one process each, since
the allocator setting cannot be undone). --numerics compares one step's loss and gradients of the two paths
on the same batch with dropout off, and prints the largest differences. --against times another checkout of
lnrepro (say, `git worktree add ../base main`) against this one, this script's step on each one's code: each
RECIPE:THREADS:STEPS in its own process, the two checkouts interleaved, round after round; it prints the median
target tokens/s and CPU time per step of each and writes every row with the
processor's name, family and vector units (benchmarks/results/mini_step_cpu_VENDOR-FAMILY-MODEL.json by default).
--layouts 1x2 2x1 times how a machine's cores are best divided among runs: JOBS steps at once, THREADS threads
each, their tokens/s summed (benchmarks/results/job_layout_cpu_VENDOR-FAMILY-MODEL.json).
--paces times each config on this checkout alone, with the heap the training jobs get, and writes its CPU time per
batch with this machine's label (benchmarks/results/mini_paces_cpu_VENDOR-FAMILY-MODEL.json), which the queue reads
to price the depths no record prices (repro/pace.py: measured_paces).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from common import choose_paths, machine, print_profile, write_json
from repro.config import resolve
from repro.data.batching import token_batches
from repro.data.text import PAD, read_meta
from repro.model import cpu_paths
from repro.model.build import build_model
from repro.train.optim import make_optimizer
from repro.train.tasks import autocast, batch_loss, batch_tokens, open_split


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="recipes/6L-6L-post_ln.yaml")
    ap.add_argument("--root", type=Path, default=Path("data"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (the heap grows over the first "
                    "few dozen of a language model's)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--precision", default="fp32", help="fp32 or bf16 (autocast, as train.precision)")
    ap.add_argument("--plain", action="store_true", help="torch's own layers and allocator settings")
    ap.add_argument("--numerics", action="store_true", help="compare one step of the two paths; no timing")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--against", type=Path, help="another checkout to time against this one, interleaved")
    ap.add_argument("--configs", nargs="+", default=["6L-6L-post_ln:1:20", "6L-6L-post_ln:2:20",
                                                     "18L-18L-post_ln:1:10", "18L-18L-post_ln:2:10",
                                                     "60L-12L-post_ln:1:5", "60L-12L-post_ln:2:5"],
                    help="RECIPE:THREADS:STEPS, the recipe's name under recipes/")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paces", action="store_true", help="time the configs on this checkout alone, for the queue's "
                    "prices (benchmarks/results/mini_paces_cpu_*.json)")
    ap.add_argument("--layouts", nargs="+", type=layout_arg, help="JOBSxTHREADS (say 1x2 2x1): that many steps side by side, "
                                                  "each its own process, against the cores' total")
    args = ap.parse_args()
    if args.against:
        return against(args)
    if args.paces:
        return paces(args)
    if args.layouts:
        return layouts(args)
    torch.set_num_threads(args.threads)
    if args.numerics:
        return numerics(args)
    paths = choose_paths(args.plain)
    r = resolve(args.recipe, "mini").recipe
    corpus = args.root / r.data.corpus
    data = open_split(r, corpus, r.data.train_split, train=True)
    torch.manual_seed(1)
    model = build_model(r, read_meta(corpus)["vocab_size"], PAD).train()
    opt = make_optimizer(model.parameters(), 1e-4, r.optim.betas, r.optim.eps, r.optim.weight_decay)
    first = token_batches(data.sizes, batch_tokens(r), 1, 1)  # epoch 1's, again from its start where too few
    batches = [data.collate(first[i % len(first)]) for i in range(args.steps + args.warmup)]

    def step(batch):
        opt.zero_grad(set_to_none=True)
        with autocast(torch.device("cpu"), args.precision):
            loss, _, ntok = batch_loss(model, batch, r)
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(1.0 / ntok)
        torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        opt.step()
        return ntok

    for b in batches[:args.warmup]:
        step(b)
    tokens, t0, c0, f0 = 0, time.perf_counter(), time.process_time(), page_faults()
    for b in batches[args.warmup:]:
        tokens += step(b)
    seconds, cpu_ms = time.perf_counter() - t0, (time.process_time() - c0) / args.steps * 1000
    faults = (page_faults() - f0) / args.steps
    print(f"{args.recipe} mini, {paths}, {args.precision}, {args.threads} thread(s): "
          f"{tokens / seconds:,.0f} target tokens/s "
          f"({seconds / args.steps * 1000:.0f} ms per step, {cpu_ms:.0f} ms of CPU time, {faults:,.0f} page faults)")
    if args.profile:
        print_profile(lambda: [step(b) for b in batches[args.warmup:args.warmup + 5]])
    if args.out:
        write_json(args.out, {"machine": machine(), "recipe": args.recipe, "threads": args.threads,
                              "precision": args.precision, "paths": paths,
                              "steps": args.steps, "target_tokens_per_s": tokens / seconds,
                              "cpu_ms_per_step": cpu_ms, "page_faults_per_step": faults})


def page_faults() -> int:
    """This process's minor page faults so far: a first touch of memory the heap has just grown by."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed_rows(args, trees: dict[str, Path], huge_pages: bool = False) -> list[dict]:
    """Each config (RECIPE:THREADS:STEPS) timed on each checkout's code, each in its own process, the checkouts
    interleaved, round after round: one row per timing. `huge_pages`: the heap as the jobs that reproduce,
    calibrate and queue start have it (launch.with_huge_pages)."""
    import os
    import subprocess
    import sys
    import tempfile
    from repro.launch import with_huge_pages
    from repro.pace import here_label
    here = Path(__file__).resolve().parents[1]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(1, args.rounds + 1):
            for config in args.configs:
                name, threads, steps = config.split(":")
                for label, tree in trees.items():
                    out = Path(tmp) / "row.json"
                    # this checkout's timing of each checkout's code (the script's folder comes first on the
                    # path, the package from PYTHONPATH)
                    cmd = [sys.executable, str(here / "benchmarks/mini_step.py"), "--recipe", f"recipes/{name}.yaml",
                           "--threads", threads, "--steps", steps, "--warmup", str(args.warmup),
                           "--root", str(args.root.resolve()),
                           "--out", str(out)]
                    env = dict(os.environ, PYTHONPATH=str(tree))
                    env = with_huge_pages(env) if huge_pages else env
                    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
                    if done.returncode:
                        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
                    got = json.loads(out.read_text())
                    rate, cpu_ms = got["target_tokens_per_s"], got["cpu_ms_per_step"]
                    rows.append({"round": rnd, "recipe": name, "threads": int(threads), "steps": int(steps),
                                 "checkout": label, "commit": _commit(tree), "machine": here_label(int(threads)),
                                 "target_tokens_per_s": rate, "cpu_ms_per_step": cpu_ms})
                    print(f"round {rnd} {name} {threads} thread(s) {label:>5}: {rate:,.0f} target tokens/s, "
                          f"{cpu_ms:.0f} ms of CPU time per step", flush=True)
    return rows


def results_file(args, kind: str) -> Path:
    from common import processor
    cpu = processor()
    return args.out or Path(f"benchmarks/results/{kind}_cpu_{cpu.get('vendor', 'cpu')}-{cpu.get('family', '')}-"
                            f"{cpu.get('model', '')}.json")


def against(args):
    """Time the configs in the other checkout and in this one, each run its own process, interleaved."""
    import statistics
    here = Path(__file__).resolve().parents[1]
    trees = {"other": args.against.resolve(), "this": here}
    rows = timed_rows(args, trees)
    for config in args.configs:
        name, threads, _ = config.split(":")
        med = {(label, key): statistics.median(r[key] for r in rows if r["recipe"] == name
                                               and r["threads"] == int(threads) and r["checkout"] == label)
               for label in trees for key in ("target_tokens_per_s", "cpu_ms_per_step")}
        rate, cpu = (lambda label: med[label, "target_tokens_per_s"]), (lambda label: med[label, "cpu_ms_per_step"])
        print(f"{name}, {threads} thread(s): {rate('other'):,.0f} -> {rate('this'):,.0f} target tokens/s, "
              f"{rate('this') / rate('other'):.2f}x; CPU time per step {cpu('other'):.0f} -> {cpu('this'):.0f} ms, "
              f"{cpu('other') / cpu('this'):.2f}x")
    write_json(results_file(args, "mini_step"), {"machine": machine(), "date": time.strftime("%Y-%m-%d"),
                                                 "rows": rows})


def paces(args):
    """The CPU seconds a batch of each config's recipe takes on this machine, for the queue to price the depths
    no record has trained here (repro/pace.py, measured_paces): benchmarks/results/mini_paces_cpu_*.json."""
    import statistics
    rows = timed_rows(args, {"this": Path(__file__).resolve().parents[1]}, huge_pages=True)
    for config in args.configs:
        name, threads, _ = config.split(":")
        cpu = statistics.median(r["cpu_ms_per_step"] for r in rows if r["recipe"] == name
                                and r["threads"] == int(threads))
        print(f"{name}, {threads} thread(s): {cpu:.0f} ms of CPU time per batch (median of {args.rounds})")
    write_json(results_file(args, "mini_paces"), {"machine": machine(), "date": time.strftime("%Y-%m-%d"),
                                                  "rows": rows})


def layout_arg(text: str) -> str:
    jobs, _, threads = text.partition("x")
    if not (jobs.isdigit() and threads.isdigit() and int(jobs) > 0 and int(threads) > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: expected JOBSxTHREADS, say 2x1")
    return text


def layouts(args):
    """The recipe's step in each JOBSxTHREADS layout: JOBS processes at once, THREADS threads each, layouts
    interleaved round after round; the machine's target tokens/s is the sum over the processes at once."""
    import os
    import statistics
    import subprocess
    import sys
    import tempfile
    from common import processor
    here = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=f"{here / 'benchmarks'}:{here}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(1, args.rounds + 1):
            for layout in args.layouts:
                jobs, threads = map(int, layout.split("x"))
                outs = [Path(tmp) / f"{layout}-{i}.json" for i in range(jobs)]
                procs = [subprocess.Popen([sys.executable, str(here / "benchmarks/mini_step.py"), "--recipe",
                                           args.recipe, "--threads", str(threads), "--steps", str(args.steps),
                                           "--root", str(args.root.resolve()), "--out", str(out)],
                                          cwd=here, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True) for out in outs]
                for proc in procs:
                    if proc.wait():
                        sys.exit(f"{layout}: a step process failed:\n{proc.stderr.read()[-2000:]}")
                rates = [json.loads(out.read_text())["target_tokens_per_s"] for out in outs]
                rows.append({"round": rnd, "layout": layout, "jobs": jobs, "threads": threads,
                             "per_process": rates, "target_tokens_per_s": sum(rates)})
                print(f"round {rnd} {layout}: {sum(rates):,.0f} target tokens/s "
                      f"({', '.join(f'{x:,.0f}' for x in rates)} a process)", flush=True)
    for layout in args.layouts:
        med = statistics.median(r["target_tokens_per_s"] for r in rows if r["layout"] == layout)
        print(f"{args.recipe} {layout}: {med:,.0f} target tokens/s on the machine (median of {args.rounds} rounds)")
    cpu = processor()
    out = args.out or Path(f"benchmarks/results/job_layout_cpu_{cpu.get('vendor', 'cpu')}-{cpu.get('family', '')}-"
                           f"{cpu.get('model', '')}.json")
    write_json(out, {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "recipe": args.recipe,
                     "steps": args.steps, "rows": rows})


def _commit(tree: Path) -> str:
    import subprocess
    done = subprocess.run(["git", "-C", str(tree), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip()


def numerics(args):
    """One step's loss and gradients through both paths, same weights and batch, dropout off."""
    r = resolve(args.recipe, "mini", ["model.dropout=0", "model.attention_dropout=0",
                                      "model.activation_dropout=0"]).recipe
    corpus = args.root / r.data.corpus
    data = open_split(r, corpus, r.data.train_split, train=True)
    torch.manual_seed(1)
    model = build_model(r, read_meta(corpus)["vocab_size"], PAD).train()
    batch = data.collate(token_batches(data.sizes, batch_tokens(r), 1, 1)[0])
    results = []
    for enabled in (False, True):
        cpu_paths.ENABLED = enabled
        model.zero_grad(set_to_none=True)
        loss, _, ntok = batch_loss(model, batch, r)
        loss.backward()
        results.append((loss.item() / ntok, [p.grad.clone() for p in model.parameters()]))
    (plain_loss, plain_grads), (fast_loss, fast_grads) = results
    rel = sorted(float((a - b).norm() / b.norm().clamp_min(1e-30)) for a, b in zip(fast_grads, plain_grads))
    print(f"{args.recipe} mini, one batch of {ntok} target tokens: loss {plain_loss:.7f} (plain) vs {fast_loss:.7f} "
          f"(cpu_paths), |difference| {abs(plain_loss - fast_loss):.2e}; relative gradient difference over the "
          f"{len(rel)} parameter tensors: median {rel[len(rel) // 2]:.1e}, largest {rel[-1]:.1e}")


if __name__ == "__main__":
    main()
