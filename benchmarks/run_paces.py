"""The pace of the runs in a runs folder, read from their logs: what a grid of runs sharing one machine achieved.

    python benchmarks/run_paces.py RUNS_DIR [--last 500] [--out benchmarks/results/run_paces.json] [--note TEXT]

For each run directory (its log.jsonl): the last logged update, the seconds it took, updates per second over its
last --last updates (each run's steady pace once every run has started), and its validation NLLs; then the sum of
the paces, the grid's updates per second. Finished or not: a lease that ends before its runs do still measures them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import log_entries, log_rows, updates_per_s, write_json


def run_pace(run: Path, last: int) -> dict:
    rows = log_entries(run)
    steps = log_rows(run, rows)
    if len(steps) < 2:
        return {"updates": steps[-1]["step"] if steps else 0}
    end = steps[-1]
    return {"updates": end["step"], "seconds": round(end["time"], 1),
            "updates_per_s": round(updates_per_s(steps, min(end["step"] - last, steps[-2]["step"])), 3),
            "valid_nll": {str(r["step"]): round(r["valid_nll"], 3) for r in rows if "valid_nll" in r}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path)
    ap.add_argument("--last", type=int, default=500)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/run_paces.json"))
    ap.add_argument("--note", default="", help="where and how the runs ran (machine, runs at once, flags)")
    a = ap.parse_args()
    if not a.runs.is_dir():
        raise SystemExit(f"{a.runs}: no such folder")
    runs = {d.name: run_pace(d, a.last)
            for d in sorted(a.runs.iterdir()) if (d / "log.jsonl").exists()}
    if not runs:
        raise SystemExit(f"{a.runs}: no run directory with a log.jsonl")
    out = {"note": a.note, "runs_at_once": len(runs), "last_updates": a.last,
           "grid_updates_per_s": round(sum(r.get("updates_per_s", 0) for r in runs.values()), 2), "runs": runs}
    for name, r in runs.items():
        print(f"{name:32} {r['updates']:6} updates  {r.get('updates_per_s', float('nan')):6.2f} updates/s")
    print(f"{len(runs)} runs: {out['grid_updates_per_s']} updates/s together")
    write_json(a.out, out)


if __name__ == "__main__":
    main()
