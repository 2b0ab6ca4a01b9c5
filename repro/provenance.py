"""Where and when a run was made: the git commit of its code, the machine (CPU model and kernels, GPUs, threads)
and the time. Training writes them into a run's status; records carry them; paces and hours tell machines apart by
them."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path


def _git(*args: str, timeout: int = 10) -> subprocess.CompletedProcess:
    """git run in the folder of this code, so it answers for the repository the code came from, not the caller's."""
    return subprocess.run(["git", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).resolve().parent)


def git_commit() -> str:
    """HEAD (with -dirty for uncommitted changes), or $LNREPRO_COMMIT when set: a tree copied to another machine
    may carry a stale .git, so the launcher of such a run names the commit it copied."""
    given = os.environ.get("LNREPRO_COMMIT", "")
    if given:
        return given
    try:
        head = _git("rev-parse", "HEAD")
        # results/ holds records and pages, not code: regenerating them beside a run changes nothing it trains.
        dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ":/",
                     ":(top,exclude)results").stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "") if head.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def in_history(commit: str) -> bool | None:
    """Whether `commit` is HEAD or an ancestor of it in the repository this code is in; None where git cannot say
    (no git, or this code installed outside its repository)."""
    try:
        if _git("rev-parse", "--is-inside-work-tree", timeout=30).returncode != 0:
            return None
        return _git("merge-base", "--is-ancestor", commit, "HEAD", timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return None


def cpuinfo(text: str | None = None) -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo ("model name", "vendor_id", "cpu family", "model", "flags"...),
    {} where there is none (not Linux)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {}
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_model() -> str:
    """The CPU's name from /proc/cpuinfo where there is one (Linux), else what `platform` knows."""
    return cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_id(text: str | None = None) -> str:
    """Vendor, family and model of the first CPU in /proc/cpuinfo (x86), or "": a virtual machine's model name
    may be a bare "AMD EPYC", which names no generation, and generations differ in speed."""
    fields = cpuinfo(text)
    if "cpu family" not in fields:
        return ""
    return f"{fields.get('vendor_id', '?')} family {fields['cpu family']} model {fields.get('model', '?')}"


def hardware(world_size: int = 1) -> dict:
    import torch  # here, not at the top: commands that train nothing start without torch
    # Two CPUs of one name can differ 2.5x in speed (AVX2 against AVX-512 kernels): record the kernels torch uses.
    # One machine's pace also differs with the threads torch was given (--threads), so they are kept too.
    info = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": str(torch.__version__), "world_size": world_size,
            "cpu": f"{cpu_model()} ({torch.backends.cpu.get_cpu_capability()})"}
    if ident := cpu_id():
        info["cpu_id"] = ident
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["gpus"] = world_size
    else:
        info["device"] = f"cpu ({platform.processor() or platform.machine()})"
        info["gpus"] = 0
    return info


def where(hardware: dict) -> str:
    """A machine in words: its GPUs by name, or its CPU with the vector kernels torch used and the family/model
    (one CPU name can hide generations of different speed), with the core count."""
    cores = f"{hardware.get('cpu_count', '?')} cores"
    if hardware.get("gpus"):
        return f"{hardware['gpus']} x {hardware.get('device', 'GPU')}, {cores}"
    cpu = hardware.get("cpu") or hardware.get("device") or "CPU"
    return ", ".join(part for part in (cpu, hardware.get("cpu_id", ""), cores) if part)


def machine(hardware: dict) -> str:
    """Which machine a run trained on, as paces and hours tell machines apart: its GPUs by name, or 0 and the CPU
    (a CPU run's #GPU is 0, not missing) with its kernels, family and model: one CPU name ("AMD EPYC") can hide
    generations of different speed, so neither paces nor hours are ever pooled over machines."""
    if hardware.get("gpus"):
        return f"{hardware['gpus']} x {hardware.get('device', 'GPU')}"
    return f"0 (CPU: {where(hardware)})"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
