"""Training updates replayed as CUDA graphs against eager updates, through `lnrepro train` itself (GPU only).

    python benchmarks/cuda_graph_updates.py [--recipe recipes/18L-18L-pre_ln.yaml] [--updates 400] [--parallel 1]
                                            [--root data] [--out benchmarks/results/cuda_graph_updates.json]

Each a real `lnrepro train --scale mini` run in a temporary folder (the prepared corpus in --root):
- the recipe without dropout (model.dropout=0, so neither run draws anything at random), trained eager, then with
  --cuda-graphs, for --updates updates, logging every 10: the largest relative difference of the logged losses and
  gradient norms (only the order of floating-point sums may differ), each run's updates per second after update
  100 (by then most shapes are captured), and the graphed run's counts (graphs, replayed and eager updates);
- --parallel K: K graphed runs with the recipe's dropout side by side (seeds 1..K) on the one GPU, each one's
  pace: what a lease of the GPU trains at once. Start CUDA MPS first (`nvidia-cuda-mps-control -d`) to let their
  kernels overlap.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import log_rows, updates_per_s, write_json

REPO = Path(__file__).resolve().parents[1]


def train_cmd(recipe: Path, folder: Path, name: str, updates: int, root: Path, seed: int, graphs: bool,
              sets: list[str]) -> list[str]:
    return [sys.executable, "-m", "repro.cli", "train", str(recipe), "--scale", "mini", "--seed", str(seed),
            "--run-dir", str(folder / name), "--results", str(folder / f"results-{name}"), "--root", str(root),
            "--set", f"optim.max_updates={updates}", "--set", "train.log_interval=10",
            "--set", f"train.validate_interval={updates}", "--set", f"train.save_interval={updates}",
            *[x for s in sets for x in ("--set", s)], *(["--cuda-graphs"] if graphs else [])]


def pace(run: Path, after: int = 100) -> float:
    return updates_per_s(log_rows(run), after)


def graph_counts(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())["segments"][-1].get("cuda_graphs", {})


def run_all(cmds: list[list[str]]) -> None:
    procs = [subprocess.Popen(c, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    for p, c in zip(procs, cmds):
        if p.wait():
            raise SystemExit(f"{' '.join(c)} failed:\n{p.stderr.read()[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", type=Path, default=REPO / "recipes/18L-18L-pre_ln.yaml")
    ap.add_argument("--updates", type=int, default=400)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--root", type=Path, default=REPO / "data")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/cuda_graph_updates.json")
    a = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("cuda_graph_updates.py needs a CUDA device")
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "recipe": a.recipe.name,
           "updates": a.updates}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        no_dropout = ["model.dropout=0"]
        for graphs in (False, True):
            run_all([train_cmd(a.recipe, folder, f"exact-{graphs}", a.updates, a.root, 1, graphs, no_dropout)])
        eager, graphed = log_rows(folder / "exact-False"), log_rows(folder / "exact-True")
        rel = lambda x, y: abs(x - y) / max(abs(y), 1e-12)
        out["agreement"] = {
            "logged_updates": len(eager),
            "max_rel_diff_loss": max(rel(g["loss"], e["loss"]) for g, e in zip(graphed, eager)),
            "max_rel_diff_grad_norm": max(rel(g["grad_norm"], e["grad_norm"]) for g, e in zip(graphed, eager))}
        out["eager_updates_per_s"] = pace(folder / "exact-False")
        out["graphed_updates_per_s"] = pace(folder / "exact-True")
        out["speedup"] = out["graphed_updates_per_s"] / out["eager_updates_per_s"]
        out["cuda_graphs"] = graph_counts(folder / "exact-True")
        if a.parallel > 1:
            run_all([train_cmd(a.recipe, folder, f"side-{k}", a.updates, a.root, k, True, [])
                     for k in range(1, a.parallel + 1)])
            out["parallel"] = {"runs": a.parallel,
                               "updates_per_s": [pace(folder / f"side-{k}") for k in range(1, a.parallel + 1)]}
    print(json.dumps(out, indent=2))
    write_json(a.out, out)


if __name__ == "__main__":
    main()
