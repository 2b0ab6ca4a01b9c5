"""Writing a figure: the PNG (temporary file, then rename) and, when asked, the plotted numbers as JSON."""

from __future__ import annotations

import fnmatch
import json
import math
from pathlib import Path

# files the suite reads back: a figure never takes their place
KEPT = ("*.log.jsonl", "log.jsonl", "seed*.json", "status.json", "choice.json", "stop.json", "*.pt", "*.yaml")


def check_targets(out: Path, json_path: Path | None, reads: tuple[Path, ...] = ()) -> None:
    """A figure goes to a .png (and its numbers to a .json) in a folder (or one it can make), never over a file it
    reads or a log, record, checkpoint or recipe: a one-line ValueError naming the path."""
    if Path(out).suffix.lower() != ".png":
        raise ValueError(f"{out}: a figure is written as PNG; give a path ending in .png")
    if json_path is not None and Path(json_path).suffix.lower() != ".json":
        raise ValueError(f"{json_path}: the plotted numbers are written as JSON; give a path ending in .json")
    inputs = {Path(p).resolve() for p in reads}
    for target in (out, json_path):
        if target is None:
            continue
        t = Path(target)
        if t.resolve() in inputs or (t.exists() and any(fnmatch.fnmatch(t.name, k) for k in KEPT)):
            raise ValueError(f"{t}: a file the suite reads (a log, record, checkpoint or recipe); the figure is not "
                             f"written over it")
        if t.is_dir():
            raise ValueError(f"{t}: a folder; give a file path")
        folder = next(p for p in t.absolute().parents if p.exists())  # the nearest that exists: made below it
        if not folder.is_dir():
            raise ValueError(f"{t}: {folder} is a file, not a folder")


def finite(data):
    """The plotted numbers with every infinity or NaN as null: valid JSON."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def save_figure(fig, out: Path, json_path: Path | None, data, reads: tuple[Path, ...] = ()) -> None:
    import matplotlib.pyplot as plt
    check_targets(out, json_path, reads)
    from repro.files import atomic_write, atomic_write_text
    try:
        atomic_write(Path(out), lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    finally:
        plt.close(fig)
    if json_path is not None:
        atomic_write_text(json_path, json.dumps(finite(data), indent=2, allow_nan=False) + "\n")
