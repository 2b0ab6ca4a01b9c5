"""`prepare` cost: pairs per second and peak memory of cleaning, SentencePiece and binarizing a generated corpus.

    python benchmarks/prepare_scaling.py --pairs 100000 300000 1000000

Each size runs in a fresh subprocess so its peak memory is its own.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine, write_json

WORDS = [f"w{i}" for i in range(20000)]


def run_one(n: int) -> dict:
    import resource
    from repro.data.parallel import prepare_parallel
    rng = random.Random(0)
    sentence = lambda: " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30)))
    pairs = ((s, " ".join(reversed(s.split()))) for s in (sentence() for _ in range(n)))
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        prepare_parallel(Path(d) / "c", "bench", pairs, {"valid": (["a b"], ["b a"])}, 8000, ("src", "tgt"), {},
                         max_sentences=200_000)
        dt = time.perf_counter() - t0
    return {"pairs": n, "seconds": dt, "pairs_per_s": n / dt,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/prepare_scaling.json"))
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one)))
        return
    rows = []
    for n in args.pairs:
        out = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True, check=True,
                             env={"LNREPRO_QUIET": "1", **__import__("os").environ})
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{n:>9,} pairs: {row['seconds']:7.1f} s, {row['pairs_per_s']:9.0f} pairs/s, peak {row['peak_mb']:.0f} MB")
    write_json(args.out, {"machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
