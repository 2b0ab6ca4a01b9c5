"""kill -9 trials of a grouped run: each trial trains a group of seeds in a process of its own, kills it at a
random moment (half of them in the stretch between a member's end and the group's next checkpoint), resumes it,
and compares every member's final weights, log and status with those of the same group never killed.

    PYTHONPATH=benchmarks:. .venv/bin/python benchmarks/kill_trials.py --trials 28

The group: the tiny Post-LN recipe, 2+2 layers, dropout on, seeds 1-3, 20 updates, a checkpoint every 5; seed 2 is
asked to stop (stop.json) and ends at its first log line, update 7, so the others train on without it.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from common import machine, write_json

REPO = Path(__file__).resolve().parents[1]

SETS = ["model.encoder_layers=2", "model.decoder_layers=2", "optim.max_updates=20", "train.save_interval=5",
        "train.log_interval=7", "train.validate_interval=10", "train.keep_last=1", "eval.average_last=1"]
SEEDS = (1, 2, 3)
TRAIN = """
import sys
from pathlib import Path
from repro.config import resolve
from repro.train.loop import train_group
root, out, resume = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "resume"
sets = sys.argv[4:]
recipes = [resolve(Path("recipes/6L-6L-post_ln.yaml"), "tiny", sets + [f"train.seed={s}"]) for s in (1, 2, 3)]
train_group(recipes, [out / f"seed{s}" for s in (1, 2, 3)], root, resume=resume)
"""


def start(root: Path, out: Path, resume: bool) -> subprocess.Popen:
    if not resume:
        (out / "seed2").mkdir(parents=True, exist_ok=True)
        (out / "seed2" / "stop.json").write_text(json.dumps({"reason": "settled"}) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", TRAIN, str(root), str(out), "resume" if resume else "new", *SETS],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen) -> None:
    _, err = p.communicate()
    if p.returncode:
        sys.exit(f"the training process ended with exit code {p.returncode}:\n{err}")


def outcome(out: Path) -> dict:
    """Each member's status, log rows (without clock times) and final weights."""
    from repro.train import checkpoint
    seen = {}
    for s in SEEDS:
        run = out / f"seed{s}"
        status = json.loads((run / "status.json").read_text())
        rows = [{k: v for k, v in json.loads(l).items() if k not in ("time", "tokens_per_s")}
                for l in (run / "log.jsonl").read_text().splitlines()]
        state = checkpoint.load(checkpoint.list_checkpoints(run)[-1])
        seen[s] = {"status": (status["status"], status["step"], status["reason"]), "log": rows,
                   "step": state["step"], "model": state["model"]}
    return seen


def same(a: dict, b: dict) -> list[str]:
    wrong = []
    for s in SEEDS:
        x, y = a[s], b[s]
        if x["status"] != y["status"] or x["step"] != y["step"]:
            wrong.append(f"seed {s}: ended {y['status']} at checkpoint {y['step']}, not {x['status']} at {x['step']}")
        elif not all(torch.equal(x["model"][k], y["model"][k]) for k in x["model"]):
            wrong.append(f"seed {s}: other weights")
        if x["log"] != y["log"]:
            wrong.append(f"seed {s}: another log")
    return wrong


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=28)
    ap.add_argument("--seed", type=int, default=0, help="of the kill moments")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/kill_trials_cpu.json")
    args = ap.parse_args()
    from repro.data.tiny import ensure_tiny_corpora
    pick = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ensure_tiny_corpora(tmp / "data")
        t = time.time()
        p = start(tmp / "data", tmp / "whole", resume=False)
        finish(p)
        whole_s = time.time() - t
        reference = outcome(tmp / "whole")
        trials = []
        for i in range(args.trials):
            out = tmp / f"trial{i}"
            p = start(tmp / "data", out, resume=False)
            if i % 2:  # between seed 2's end and the group's next checkpoint: at the first of its files to appear
                watch = pick.choice(["seed2/checkpoint_7.pt", "seed1/resume_7.pt", "seed3/resume_7.pt",
                                     "seed2/status.json"])
                while not (out / watch).exists() and p.poll() is None:
                    time.sleep(0.0005)
                moment = f"at {watch}"
            else:
                delay = pick.uniform(0, 0.9 * whole_s)  # a resumed process starts slower than it trains
                time.sleep(delay)
                moment = f"after {delay:.2f} s"
            killed = p.poll() is None
            p.send_signal(signal.SIGKILL)
            p.wait()
            finish(start(tmp / "data", out, resume=True))
            wrong = same(reference, outcome(out))
            trials.append({"moment": moment, "killed": killed, "wrong": wrong})
            print(f"trial {i + 1:2d}: killed {moment:<24} {'SAME' if not wrong else '; '.join(wrong)}"
                  + ("" if killed else " (it had ended before the kill)"), flush=True)
            shutil.rmtree(out)
    bad = [t for t in trials if t["wrong"]]
    print(f"{len(trials) - len(bad)} of {len(trials)} resumed bit for bit (uninterrupted group: {whole_s:.1f} s)")
    write_json(args.out, {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "trials": trials,
                          "uninterrupted_s": round(whole_s, 1)})
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
