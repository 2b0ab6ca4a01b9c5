"""Figures drawn from runs: 1 (training loss curves, 18L-18L), 6 (validation NLL, 18L-18L), 8 (best validation NLL
against total layers), 9 (validation NLL, 36L-36L). Each reads the run directories named by results/ records.
"""

from __future__ import annotations

import math
from pathlib import Path

from repro.figures.output import save_figure
from repro.results import current_records, record_log
from repro.tables.spec import TITLES

VARIANT_ORDER = ("post_ln", "pre_ln", "b2t")


def figure_from_runs(number: int, out: Path, json_path: Path | None, results_dir: Path, scale: str,
                     root: Path = Path("data")) -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if number == 5:
        return figure5(out, json_path, results_dir, scale, root)
    current, _ = current_records(results_dir, scale)
    records = [r for recs in current.values() for r in recs if r["task"] == "mt"]
    log = lambda r: record_log(results_dir, r)  # the log committed beside the record, else the run directory's
    depth = {1: "18L-18L", 6: "18L-18L", 9: "36L-36L"}.get(number)
    data: dict = {}
    labels = {v: TITLES[v] for v in VARIANT_ORDER}  # a curve drawn from one run names its seed and whether that run failed
    if depth:
        wanted = {f"{depth}-{v}": v for v in VARIANT_ORDER}
        key = "loss" if number == 1 else "valid_nll"
        for name, variant in wanted.items():
            recs = sorted((r for r in records if r["recipe_name"] == name), key=lambda r: r["seed"])
            curve = [(row["step"], row[key]) for row in (log(recs[0]) if recs else []) if key in row]
            if curve:
                data[variant] = curve
                labels[variant] = f"{TITLES[variant]} (seed {recs[0]['seed']}" + (
                    ", training failed)" if recs[0]["status"] == "failed" else ")")
        if not data:
            raise ValueError(f"figure {number}: no training logs at scale {scale} for "
                             + ", ".join(f"recipes/{m}.yaml" for m in wanted) + "; " + make_runs(depth, scale))
    else:
        data, notes = figure8_points(records, log, results_dir, scale)
    fig, ax = plt.subplots(figsize=(6, 4.4 if number == 8 else 4))
    for v in VARIANT_ORDER:
        if v not in data:
            continue
        if number != 8:
            xs, ys = zip(*sorted(data[v]))
            ax.plot(xs, ys, label=labels[v])
            continue
        trained = sorted((p["layers"], p["mean"]) for p in data[v] if p["mean"] is not None)
        line = ax.plot(*zip(*trained), marker="o", label=labels[v]) if trained else ax.plot([], [], label=labels[v])
        colour = line[0].get_color()
        for p in data[v]:  # a failed seed: a cross at its best NLL, apart from the line of the seeds that trained
            crosses = [y for y in p["failed_best"] if y is not None]
            if crosses:
                ax.scatter([p["layers"]] * len(crosses), crosses, marker="x", color=colour, zorder=3)
            if p["failed"]:
                y = p["mean"] if p["mean"] is not None else (crosses[0] if crosses else None)
                if y is not None:
                    ax.annotate(f"{p['failed']} of {p['seeds']} failed", (p["layers"], y), fontsize=7,
                                xytext=(5, -11), textcoords="offset points", color=colour)
    if number == 8:
        ax.margins(x=0.12, y=0.12)
        if notes:
            fig.text(0.01, 0.01, "\n".join(notes), fontsize=7, va="bottom")
    ax.set_xlabel("total layers (encoder and decoder equal)" if number == 8 else "updates")
    ax.set_ylabel({1: "training loss (label-smoothed, nats)", 8: "best validation NLL (nats)"}.get(number, "validation NLL (nats)"))
    ax.set_title(f"Figure {number} at scale '{scale}'" + (f" ({depth})" if depth else ""))
    ax.legend()
    fig.tight_layout(rect=(0, 0.04 * len(notes) if number == 8 else 0, 1, 1))
    save_figure(fig, out, json_path, data if number != 8 else {"points": data, "notes": notes})
    return data


FIGURE8_DEPTHS = ("6L-6L", "12L-12L", "18L-18L", "36L-36L", "50L-50L")  # the paper's: encoder and decoder equal


def figure8_points(records: list[dict], log, results_dir: Path, scale: str) -> tuple[dict, list[str]]:
    """Figure 8's points: per variant and depth, the mean best validation NLL of the seeds that trained, and each
    failed seed (as the judging rules decide: diverged, learned nothing, output collapsed) apart; notes name the
    depths not run. 60L-12L (Table 2's) splits its layers unevenly, so it is not one of the figure's."""
    from repro.judging import judge_record, references_for
    from repro.references import load_references
    refs = load_references(results_dir)
    data: dict[str, list[dict]] = {}
    not_run = {}
    for v in VARIANT_ORDER:
        for depth in FIGURE8_DEPTHS:
            recs = [r for r in records if r["recipe_name"] == f"{depth}-{v}"]
            if not recs:
                not_run.setdefault(depth, []).append(TITLES[v])
                continue
            trained, failed = [], []
            for r in recs:
                best = min((row["valid_nll"] for row in log(r) if isinstance(row.get("valid_nll"), (int, float))
                            and math.isfinite(row["valid_nll"])), default=None)
                (failed if judge_record(r, references_for(r, refs))[0] == "failed" else trained).append(best)
            trained = [b for b in trained if b is not None]
            data.setdefault(v, []).append({
                "depth": depth, "layers": recs[0]["encoder_layers"] + recs[0]["decoder_layers"],
                "mean": sum(trained) / len(trained) if trained else None, "trained_best": trained,
                "failed_best": failed, "failed": len(failed), "seeds": len(recs)})
    if not data:
        raise ValueError(f"figure 8: no MT runs at scale {scale} of " + ", ".join(FIGURE8_DEPTHS) + "; "
                         + make_runs("6L-6L", scale))
    import textwrap
    notes = textwrap.wrap(f"not run at scale '{scale}': " + "; ".join(f"{d} ({', '.join(vs)})"
                                                                     for d, vs in not_run.items()), 110)
    return data, (notes if not_run else []) + ["a line joins the mean of the seeds that trained; x: a failed "
                                               "seed's best NLL"]


def figure5(out: Path, json_path: Path | None, results_dir: Path, scale: str, root: Path, depth: str = "6L-6L",
            sentences: int = 64) -> dict:
    """Cosine similarities among the outputs of each layer of trained 6L-6L models, on validation sentences."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from repro.config import resolve
    from repro.data.text import PAD, read_meta
    from repro.eval.similarity import layer_similarities
    from repro.model.build import build_model
    from repro.train import checkpoint
    from repro.train.tasks import open_split

    wanted = {f"{depth}-{v}": v for v in VARIANT_ORDER}
    current, _ = current_records(results_dir, scale)
    runs = {wanted[name]: min((r for r in recs if r["status"] == "completed"), key=lambda r: r["seed"])
            for name, recs in current.items() if name in wanted and any(r["status"] == "completed" for r in recs)}
    if not runs:
        raise ValueError(f"figure 5: no completed {depth} runs at scale {scale}; " + make_runs(depth, scale))
    data = {}
    for v, rec in runs.items():
        if "layer_cosine" in rec.get("metrics", {}):  # computed by `lnrepro evaluate`, committed with the record
            data[v] = rec["metrics"]["layer_cosine"]
            continue
        if not Path(rec.get("run_dir", "")).is_dir():
            raise ValueError(f"figure 5: the {rec['recipe_name']} seed {rec['seed']} record has no layer "
                             f"similarities and its run directory {rec.get('run_dir')} is not here; evaluate the run "
                             f"again (lnrepro evaluate RUN_DIR)")
        res = resolve(rec["recipe"], rec["scale"], rec.get("overrides", []))
        r = res.recipe
        corpus = Path(root) / r.data.corpus
        ckpts = checkpoint.list_checkpoints(Path(rec["run_dir"]))[-r.eval.average_last:]
        if not ckpts:
            raise ValueError(f"figure 5: {rec['run_dir']} has no checkpoints")
        model = build_model(r, read_meta(corpus)["vocab_size"], PAD)
        model.load_state_dict(checkpoint.average(ckpts))
        data[v] = layer_similarities(model, open_split(r, corpus, r.data.valid_split), sentences)
    variants = [v for v in VARIANT_ORDER if v in data]
    fig, axes = plt.subplots(2, len(variants), figsize=(3.4 * len(variants) + 1.2, 6.6), squeeze=False,
                             layout="constrained")
    for col, v in enumerate(variants):
        for row, side in enumerate(("encoder", "decoder")):
            ax = axes[row][col]
            m = data[v][side]
            im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis", origin="lower")
            for i in range(len(m)):
                for j in range(len(m)):  # dark cells get white numbers, light cells black
                    ax.text(j, i, f"{m[i][j]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if m[i][j] < 0.6 else "black")
            ax.set_title(f"{TITLES[v]}: {side}", fontsize=9)
            ax.set_xticks(range(len(m)), range(1, len(m) + 1))
            ax.set_yticks(range(len(m)), range(1, len(m) + 1))
            ax.set_xlabel("layer")
            ax.set_ylabel("layer")
    fig.colorbar(im, ax=axes, shrink=0.6, label="cosine similarity")
    fig.suptitle(f"Figure 5: cosine similarity among layer outputs ({depth}, scale '{scale}')", fontsize=10)
    save_figure(fig, out, json_path, data)
    return data


def make_runs(depth: str, scale: str) -> str:
    """The command that makes a depth's MT runs: Table 1's `reproduce` where Table 1 holds the depth, else one
    `train` per recipe (36L-36L and 50L-50L, Figure 9's, are in no table)."""
    from repro.tables.spec import SPECS
    if depth in SPECS[1].groups:
        return f"run `lnrepro reproduce 1 --scale {scale} --cells {depth}`"
    return "run " + "; ".join(f"`lnrepro train recipes/{depth}-{v}.yaml --scale {scale}`" for v in VARIANT_ORDER)
