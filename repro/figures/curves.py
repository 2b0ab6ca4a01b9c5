"""`lnrepro curves RUN_DIR...`: the training loss and validation NLL of any runs, side by side in one PNG, read from
their `log.jsonl` (a record's copy, `seedN.log.jsonl`, works as well)."""

from __future__ import annotations

from pathlib import Path

from repro.figures.output import save_figure


def read_log(path: Path) -> list[dict]:
    """A run's log rows: `path` is a run directory or a log file; a garbled line names the file."""
    path = Path(path)
    log = path / "log.jsonl" if path.is_dir() else path
    if not log.is_file():
        raise ValueError(f"{path}: no log.jsonl (a run directory of `lnrepro train`, or a record's .log.jsonl)")
    from repro.results import read_jsonl
    return read_jsonl(log)


def draw_curves(paths: list[Path], out: Path, json_path: Path | None = None) -> dict:
    """Training loss (left) and validation NLL (right) against updates, one line per run, named by its folder."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = {}
    for p in paths:
        rows = read_log(p)
        p = Path(p)
        name = p.name if p.is_dir() else f"{p.parent.name}/{p.name.replace('.log.jsonl', '')}"  # a record's log
        while name in data:
            name += "'"
        data[name] = {"loss": [(r["step"], r["loss"]) for r in rows if "loss" in r],
                      "valid_nll": [(r["step"], r["valid_nll"]) for r in rows if "valid_nll" in r]}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in ((axes[0], "loss", "training loss (label-smoothed, nats)"),
                           (axes[1], "valid_nll", "validation NLL (nats)")):
        for name, curves in data.items():
            if curves[key]:
                xs, ys = zip(*curves[key])
                ax.plot(xs, ys, label=name, marker="o" if key == "valid_nll" else None, markersize=3)
        ax.set_xlabel("updates")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out, json_path, data)
    return data
