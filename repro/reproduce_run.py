"""What `lnrepro reproduce TABLE` does once its arguments are checked: plan the table's runs (repro/reproduce.py),
show the plan, then train and evaluate what is missing, on this machine's lanes (repro/launch.py) or as SLURM jobs
(submitit), and render the table. A plan, launch or run that fails is a ValueError (RecipeError) of one line."""

from __future__ import annotations

from pathlib import Path

from repro import reproduce as rp
from repro.config import resolve
from repro.data.corpora import check_prepared
from repro.data.tiny import ensure_tiny_corpora
from repro.launch import run_jobs
from repro.options import check_folder, check_jobs
from repro.progress import console
from repro.tables.render import render_table

LAUNCHERS = ("local", "slurm", "submitit-local")


def run(table: int, scale: str, seeds: int, cells: list[str], jobs: int, threads: int | None, launcher: str,
        plan_only: bool, slurm: dict, runs: Path, data_root: Path, results: Path, cuda_graphs: bool,
        tokens_per_gpu: int | None, group: bool | None) -> None:
    """`slurm`: the command's partition, account, time and gpus (None where not given), read with
    --slurm-config's file when the launcher is not local."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"--launcher {launcher!r}: expected {', '.join(LAUNCHERS[:-1])} or {LAUNCHERS[-1]}")
    check_jobs(jobs)
    for folder, option in ((results, "--results"), (runs, "--runs"), (data_root, "--root")):
        check_folder(folder, option)
    settings = rp.slurm_settings(slurm.pop("config", None), slurm) if launcher != "local" else {}
    slurm_gpus = settings.get("gpus", 1) if launcher == "slurm" else None
    planned = rp.plan(table, scale, seeds, cells, results, runs, jobs, threads, cuda_graphs, slurm_gpus)
    if scale == "tiny":  # after the arguments are checked: a wrong one makes nothing
        ensure_tiny_corpora(data_root)
    stale = rp.stale_records(planned)
    train_flags = (("--cuda-graphs",) if cuda_graphs else ()) + (
        ("--tokens-per-gpu", str(tokens_per_gpu)) if tokens_per_gpu else ())
    grouping = "auto" if group is None else ("group" if group else "no-group")
    on_gpu = (launcher == "slurm" and slurm_gpus > 0) or (launcher == "local" and rp._local_gpus() > 0)
    lanes = rp.lanes(planned, grouping, on_gpu, train_flags)
    print(rp.describe_plan(planned, jobs if launcher == "local" else 1, lanes, rp.device_name(on_gpu)), end="")
    if plan_only:
        return
    if cuda_graphs:  # refused here, not by every job; a SLURM job's machine is taken to have its GPUs
        rp.check_graphable_runs(planned, on_gpu=launcher == "slurm")
    if stale:
        raise ValueError(f"{len(stale)} records of earlier recipe versions hold the slots these runs write: remove "
                         f"them first (git rm {' '.join(stale[:3])}{' ...' if len(stale) > 3 else ''})")
    todo = rp.to_launch(planned)
    running = [r.name for r in planned if r.state == "running"]
    if running:  # another command trains them; starting them here would only be refused by their locks
        who = ("1 run trains in another process and is left to it" if len(running) == 1 else
               f"{len(running)} runs train in other processes and are left to them")
        console.print(f"{who}: {', '.join(running)}")
    if not todo:
        runs_of = f"runs of table {table} at scale {scale}"
        console.print(f"nothing to start: the {len(planned)} {runs_of} are done or training elsewhere" if running
                      else f"nothing to do: all {len(planned)} {runs_of} are done")
    elif launcher == "local":
        check_prepared({resolve(r.recipe, scale).recipe.data.corpus for r in todo}, data_root)
        done = run_jobs(rp.local_jobs(planned, results, data_root, train_flags, grouping, on_gpu), jobs,
                        threads or rp.launch_threads(planned, jobs))
        bad = [j for j in done if j.state != "done"]
        if bad:
            raise ValueError(f"{len(bad)} runs did not finish: " + ", ".join(f"{j.name} ({j.log})" for j in bad))
    elif not submit(planned, table, scale, seeds, launcher, settings, slurm_gpus, runs, data_root, results,
                    train_flags, grouping):
        return
    out = render_table(table, scale=scale, fmt="text", results_dir=results)
    if out:
        print(out, end="")


def submit(planned: list, table: int, scale: str, seeds: int, launcher: str, settings: dict, slurm_gpus: int | None,
           runs: Path, data_root: Path, results: Path, train_flags: tuple, grouping: str) -> bool:
    """The runs as submitit jobs: on SLURM, said how to follow them (False: nothing to render yet); on this machine
    (submitit-local), waited for (True)."""
    submitted = rp.submit(planned, results, data_root, runs / "slurm", settings,
                          local=launcher == "submitit-local", train_flags=train_flags, grouping=grouping)
    console.print(f"submitted {len(submitted)} jobs: " + ", ".join(str(j.job_id) for j in submitted))
    if launcher == "slurm":
        console.print(f"run `lnrepro reproduce {table} --scale {scale} --seeds {seeds} --launcher slurm "
                      f"--gpus {slurm_gpus} --plan` to follow them, and `lnrepro table {table} --scale "
                      f"{scale}` when they are done")
        return False
    for job in submitted:
        try:
            job.result()
        except Exception as e:  # a failed job: its log under runs/slurm says why
            raise ValueError(f"submitit job {job.job_id} failed ({type(e).__name__}); its log is under "
                             f"{runs / 'slurm'}") from None
    return True
