"""Run records with provenance: one JSON file per (scale, recipe, seed) under results/, written atomically.

A record names the run id, the recipe path and hash, the git commit, scale, seed, hardware, start time, duration,
status (completed / failed) with its reason, and the metrics. Tables and claims read only these records.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import torch

RESULTS_DIR = Path(os.environ.get("LNREPRO_RESULTS", "results"))


def git_commit() -> str:
    """HEAD (with -dirty for uncommitted changes), or $LNREPRO_COMMIT when set: a tree copied to another machine
    may carry a stale .git, so the launcher of such a run names the commit it copied."""
    given = os.environ.get("LNREPRO_COMMIT", "")
    if given:
        return given
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":/", ":(top,exclude)results"], capture_output=True,
                               text=True, timeout=10, cwd=Path(__file__).resolve().parent).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def hardware(world_size: int = 1) -> dict:
    info = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "world_size": world_size}
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["gpus"] = world_size
    else:
        info["device"] = f"cpu ({platform.processor() or platform.machine()})"
        info["gpus"] = 0
    return info


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: a reader sees the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def record_path(results_dir: Path, scale: str, recipe_name: str, seed: int) -> Path:
    return Path(results_dir) / scale / recipe_name / f"seed{seed}.json"


def write_record(results_dir: Path, record: dict) -> Path:
    path = record_path(results_dir, record["scale"], record["recipe_name"], record["seed"])
    atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def load_records(results_dir: Path, scale: str | None = None) -> list[dict]:
    root = Path(results_dir)
    if not root.is_dir():
        return []
    base = root / scale if scale else root
    return [json.loads(p.read_text()) for p in sorted(base.rglob("seed*.json"))]
