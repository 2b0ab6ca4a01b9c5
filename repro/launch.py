"""Run several `lnrepro` commands at once on one machine: separate processes, the cores divided among them.

Each job is a list of `lnrepro` arguments run as `python -m repro.cli ...` with its own log file and thread count
(LNREPRO_THREADS, OMP_NUM_THREADS), its heap on huge pages (HUGE_PAGES). A rich live view shows each job's state
and, when the job names a run directory, its latest update and loss from the run's log.jsonl. Ctrl-C, SIGTERM
(kill, timeout, a batch system) and SIGHUP stop every job; their checkpoints stay, so running the same jobs again
resumes them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from repro.progress import console
from repro.files import jsonl_rows


@dataclass
class Job:
    name: str
    steps: list[list[str]]
    """`lnrepro` argument lists run one after the other (e.g. train then evaluate); a failing step ends the job."""
    log: Path
    run_dir: Path | None = None
    total_updates: int = 0
    covers: tuple = ()
    """What it trains, as its caller names runs (the queue's (recipe, seed) pairs), so a rebuilt list leaves them."""
    state: str = "queued"
    returncode: int | None = None
    started: float = 0.0
    finished: float = 0.0
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _step: int = 0


def default_threads(jobs: int, runs: int | None = None) -> int:
    """Cores divided among the jobs that run at once (`jobs`, or fewer when only `runs` are left), at least one
    each."""
    at_once = min(jobs, runs) if runs is not None else jobs
    return max(1, (os.cpu_count() or 1) // max(at_once, 1))


def newest_log_row(run_dir: Path) -> dict | None:
    """The newest training row (one with a loss) of a run's log.jsonl; None before its first."""
    rows = newest_log_rows(run_dir)
    return rows[-1] if rows else None


def newest_log_rows(run_dir: Path, tail: int = 4096) -> list[dict]:
    """The training rows (those with a loss) in the last `tail` bytes of a run's log.jsonl, oldest first, read from
    its end; a line cut by the seek or still being written is skipped."""
    path = run_dir / "log.jsonl"
    try:
        with open(path, "rb") as f:
            start = max(0, path.stat().st_size - tail)
            f.seek(start)
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    # past a seek the first line is cut
    return jsonl_rows([line for line in (lines[1:] if start else lines) if '"loss"' in line], path, tolerant=True)


def _progress(job: Job) -> tuple[str, str]:
    """(update, loss) from the newest training row of the job's run log."""
    row = newest_log_row(job.run_dir) if job.run_dir is not None else None
    if not row or "step" not in row or "loss" not in row:
        return "", ""
    total = f"/{job.total_updates}" if job.total_updates else ""
    return f"{row['step']}{total}", f"{row['loss']:.3f}"


def _view(jobs: list[Job]):
    from rich.table import Table
    t = Table(title=f"{sum(j.state == 'done' for j in jobs)}/{len(jobs)} jobs done", expand=False)
    for col in ("job", "state", "update", "loss", "time"):
        t.add_column(col, no_wrap=True)
    for j in jobs:
        update, loss = _progress(j) if j.state in ("running", "done", "failed") else ("", "")
        spent = (j.finished or time.time()) - j.started if j.started else 0
        colour = {"done": "green", "failed": "red", "running": "cyan"}.get(j.state, "dim")
        from rich.text import Text
        t.add_row(Text(j.name), Text(j.state, style=colour), update, loss, f"{spent / 60:.1f} min" if spent else "")
    return t


HUGE_PAGES = "glibc.malloc.hugetlb=1"
"""glibc's malloc (2.35 on) backs its heap with transparent huge pages: as the heap grows its pages are faulted in
2 MB at a time rather than 4 kB, with fewer TLB misses after: 0-7% less CPU time per mini LM and speech step
(benchmarks/README.md, "Huge pages for the heap"). glibc reads it at process start only; elsewhere it is ignored."""


def with_huge_pages(env: dict[str, str]) -> dict[str, str]:
    """env with HUGE_PAGES among its GLIBC_TUNABLES, unless they already set malloc's hugetlb."""
    tunables = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb=" in tunables:
        return env
    return {**env, "GLIBC_TUNABLES": f"{tunables}:{HUGE_PAGES}" if tunables else HUGE_PAGES}


def _start_step(job: Job, threads: int) -> None:
    env = with_huge_pages(dict(os.environ, LNREPRO_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                               MKL_NUM_THREADS=str(threads), LNREPRO_QUIET="1"))
    job.log.parent.mkdir(parents=True, exist_ok=True)
    with open(job.log, "a") as log:
        log.write(f"$ lnrepro {' '.join(job.steps[job._step])}\n")
        log.flush()
        job._proc = subprocess.Popen([sys.executable, "-m", "repro.cli", *job.steps[job._step]], stdout=log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                     preexec_fn=_stop_with_parent)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _stop_with_parent() -> None:
    """In a job's process, before it starts: SIGTERM when the launching process dies, however it dies (kill -9
    included), so no training goes on unowned; a training stopped so checkpoints first (repro/train/loop.py).
    Linux's prctl(PR_SET_PDEATHSIG); elsewhere nothing."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _on_stop_signals(handler) -> dict:
    """Set `handler` for the stop signals the caller has not chosen to ignore (nohup ignores SIGHUP, and so it
    stays ignored); returns the handlers to restore. Only the main thread may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS if signal.getsignal(sig) != signal.SIG_IGN}


def run_jobs(jobs: list[Job], parallel: int, threads: int, poll_s: float = 2.0,
             on_finish: Callable[[Job], None] | None = None, on_tick: Callable[[], None] | None = None,
             tick_s: float = 60.0, refill: Callable[[list[Job]], list[Job] | None] | None = None) -> list[Job]:
    """Run the jobs, at most `parallel` at once; returns them (and any `refill` gave) with state done/failed and
    their return codes.

    `on_finish` is called with each job as it ends (done or failed), so that what it made can be kept at once
    rather than only after the last job; `on_tick` every `tick_s` seconds while jobs run, to watch them; `refill`,
    after `on_finish`, with the jobs started so far (running or ended): the jobs to take next, in place of those
    still queued (a queue rebuilt from the records the ended job wrote), or None to keep those.
    """
    from rich.live import Live

    pending = [j for j in jobs if j.state == "queued"]
    running: list[Job] = []
    quiet = bool(os.environ.get("LNREPRO_QUIET")) or not console.is_terminal
    live = None if quiet else Live(_view(jobs), console=console, refresh_per_second=1)
    # Each job runs in a session of its own, so a signal to this process alone would leave it training, orphaned
    # and holding its run directory's lock: SIGTERM and SIGHUP stop the jobs as Ctrl-C does.
    restore = _on_stop_signals(_interrupt)
    ticked = time.time()
    try:
        if live:
            live.start()
        while pending or running:
            while pending and len(running) < parallel:
                job = pending.pop(0)
                job.state, job.started = "running", time.time()
                _start_step(job, threads)
                running.append(job)
                if quiet:
                    console.print(f"started {job.name} (log {job.log})")
            time.sleep(poll_s)
            if on_tick and time.time() - ticked >= tick_s:
                on_tick()
                ticked = time.time()
            for job in list(running):
                code = job._proc.poll()
                if code is None:
                    continue
                if code == 0 and job._step + 1 < len(job.steps):
                    job._step += 1
                    _start_step(job, threads)
                    continue
                job.returncode, job.finished = code, time.time()
                job.state = "done" if code == 0 else "failed"
                running.remove(job)
                if quiet:
                    console.print(f"{job.state} {job.name} ({(job.finished - job.started) / 60:.1f} min)")
                if on_finish:
                    on_finish(job)
                fresh = refill([j for j in jobs if j.state != "queued"]) if refill else None
                if fresh is not None:  # None: keep the list as it was
                    pending = fresh
                    jobs[:] = [j for j in jobs if j.state != "queued"] + pending
            if live:
                live.update(_view(jobs))
    except KeyboardInterrupt:
        _on_stop_signals(signal.SIG_IGN)  # a second stop signal must not cut the clean-up short
        for job in running:  # the whole process group: a job's own children stop too
            os.killpg(job._proc.pid, signal.SIGTERM)
        for job in running:
            job._proc.wait()
            job.state = "stopped"
        console.print("stopped; run the same command again to resume from the checkpoints")
        raise
    finally:
        if live:
            live.stop()
        for sig, handler in restore.items():
            signal.signal(sig, handler)
    return jobs
