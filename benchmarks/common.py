"""Helpers shared by the benchmarks: timing with warm-up, peak memory, JSON output."""

from __future__ import annotations

import json
import platform
import resource
import statistics
import time
from pathlib import Path

import torch


def median_time(fn, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def choose_paths(plain: bool, device: torch.device = torch.device("cpu")) -> str:
    """lnrepro's CPU paths as training and evaluation set them (repro/model/cpu_paths.py), or torch's own layers
    and allocator settings with `plain`; returns the label the benchmarks print: "plain" on a GPU either way,
    where those layers are torch's own."""
    from repro.model import cpu_paths
    if plain:
        cpu_paths.ENABLED = False
    elif device.type == "cpu":
        cpu_paths.keep_freed_memory()
    return "cpu_paths" if device.type == "cpu" and not plain else "plain"


def print_profile(run, device: torch.device = torch.device("cpu"), rows: int = 25) -> None:
    """Run `run()` under torch's profiler and print its top operators: by self device time on a GPU, else by self
    CPU time."""
    from torch.profiler import ProfilerActivity, profile
    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        run()
        if cuda:
            torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total",
                                    row_limit=rows))


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def processor() -> dict:
    """The CPU as /proc/cpuinfo names it: model, vendor, family, and the vector units that decide its kernels."""
    from repro.provenance import cpuinfo
    fields = cpuinfo()
    if not fields:
        return {"name": platform.processor()}
    flags = fields.get("flags", "").split()
    return {"name": fields.get("model name", ""), "vendor": fields.get("vendor_id", ""),
            "family": fields.get("cpu family", ""), "model": fields.get("model", ""),
            "vector_units": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]}


def machine() -> dict:
    info = {"platform": platform.platform(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "processor": processor()}
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
    return info


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def log_entries(run: Path) -> list[dict]:
    """Every row of a run directory's log.jsonl (training and validation), in order."""
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def log_rows(run: Path, entries: list[dict] | None = None) -> list[dict]:
    """A run directory's logged training rows (those with a loss), in order; from `entries` where already read."""
    return [row for row in (entries if entries is not None else log_entries(run)) if "loss" in row]


def updates_per_s(rows: list[dict], from_step: int) -> float:
    """Updates per second from the first logged row at or after `from_step` to the last."""
    start = next(r for r in rows if r["step"] >= from_step)
    return (rows[-1]["step"] - start["step"]) / (rows[-1]["time"] - start["time"])
