"""Figures drawn from runs: 1 (training loss curves, 18L-18L), 6 (validation NLL, 18L-18L), 8 (best validation NLL
against total layers), 9 (validation NLL, 36L-36L). Each reads the run directories named by results/ records.
"""

from __future__ import annotations

import json
from pathlib import Path

from repro.results import load_records

VARIANT_ORDER = ("post_ln", "pre_ln", "b2t")
TITLES = {"post_ln": "Post-LN", "pre_ln": "Pre-LN", "b2t": "B2T connection"}


def _log(record: dict) -> list[dict]:
    path = Path(record["run_dir"]) / "log.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.is_file() else []


def figure_from_runs(number: int, out: Path, json_path: Path | None, results_dir: Path, scale: str) -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if number == 5:
        raise ValueError("figure 5 (cosine similarity among layer outputs) is not built yet in this version")
    records = [r for r in load_records(results_dir, scale) if r["task"] == "mt"]
    depth = {1: "18L-18L", 6: "18L-18L", 9: "36L-36L"}.get(number)
    data: dict = {}
    if depth:
        wanted = {f"{depth}-{v}": v for v in VARIANT_ORDER}
        for r in records:
            if r["recipe_name"] in wanted and r["seed"] == min(x["seed"] for x in records if x["recipe_name"] == r["recipe_name"]):
                rows = _log(r)
                key = "loss" if number == 1 else "valid_nll"
                data[wanted[r["recipe_name"]]] = [(row["step"], row[key]) for row in rows if key in row]
        missing = [n for n, v in wanted.items() if v not in data or not data[v]]
        if number != 1 and "post_ln" in [wanted[m] for m in missing]:
            missing = [m for m in missing if not m.endswith("post_ln")]  # the paper omits diverged Post-LN
        if missing and not data:
            raise ValueError(f"figure {number}: no runs at scale {scale}; train "
                             + ", ".join(f"recipes/{m}.yaml" for m in missing) + f" with --scale {scale}")
    else:  # figure 8: best validation NLL against total layers
        for r in records:
            if r["status"] != "completed" or r["variant"] not in VARIANT_ORDER:
                continue
            best = min((row["valid_nll"] for row in _log(r) if "valid_nll" in row), default=None)
            if best is not None:
                data.setdefault(r["variant"], []).append((r["encoder_layers"] + r["decoder_layers"], best))
        if not data:
            raise ValueError(f"figure 8: no completed MT runs at scale {scale}; train recipes/*-b2t.yaml etc.")
    fig, ax = plt.subplots(figsize=(6, 4))
    for v in VARIANT_ORDER:
        if v in data:
            xs, ys = zip(*sorted(data[v]))
            ax.plot(xs, ys, marker="o" if number == 8 else None, label=TITLES[v])
    ax.set_xlabel("total layers" if number == 8 else "updates")
    ax.set_ylabel({1: "training loss (label-smoothed, nats)", 8: "best validation NLL (nats)"}.get(number, "validation NLL (nats)"))
    ax.set_title(f"Figure {number} at scale '{scale}'" + (f" ({depth})" if depth else ""))
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    if json_path:
        json_path.write_text(json.dumps(data, indent=2) + "\n")
    return data
