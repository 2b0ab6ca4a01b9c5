"""`lnrepro reproduce TABLE`: every (recipe, scale, seed) run a table needs, planned, run and evaluated.

The plan comes from the table's spec (repro/tables/spec.py). A run is
- done: its record (results/<scale>/<recipe>/seed<N>.json) has the current recipe hash and is evaluated, or failed;
- partial: its run directory holds a started or finished run that still needs training or evaluation;
- missing: nothing yet.
Each run that is not done is one job of `lnrepro train ... --resume` then `lnrepro evaluate`, written to the same
records as by hand (repro/results.py keeps them safe). Jobs run on this machine (repro/launch.py) or as SLURM jobs
through submitit, one job per run, `torchrun` inside when a job has several GPUs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from repro import provenance
from repro.config import run_folder
from repro.files import read_json
from repro.pace import (calibration_timings, depth, estimate, group_gain, machines_of, measured_estimate, measured_rates,
                        recipe_updates, stretch_paces, wall_time)
from repro.provenance import machine
from repro.results import current_hash, load_records, record_path, recipes_dir, stretch_hardware
from repro.tables.spec import SPECS
from repro.train.lock import lock_holder


@dataclass
class PlannedRun:
    recipe_name: str
    scale: str
    seed: int
    run_dir: Path
    state: str = "missing"       # done / running (in another process) / partial / missing
    detail: str = ""
    estimate_s: float | None = None
    estimate_from: str = ""      # "" its own earlier runs here; else what stood in: "its depth", "other machines"
    took_s: float | None = None  # a done run's recorded training time: shown instead of its estimate

    @property
    def recipe(self) -> Path:
        return recipes_dir() / f"{self.recipe_name}.yaml"

    @property
    def name(self) -> str:
        return f"{self.recipe_name}-{self.scale}-s{self.seed}"


def parse_cells(table: int, cells: list[str]) -> list[tuple[str, str]]:
    """--cells GROUP or GROUP:METHOD (e.g. 6L-6L, 18L-18L:b2t); all cells when empty."""
    spec = SPECS[table]
    every = [(g, m) for g, ms in spec.groups.items() for m in ms]
    if not cells:
        return every
    chosen = []
    for c in cells:
        group, _, method = c.partition(":")
        hits = [(g, m) for g, m in every if g == group and (not method or m == method)]
        if not hits:
            raise ValueError(f"--cells {c!r}: table {table} has no such cell (groups: {', '.join(spec.groups)}; "
                             f"methods: {', '.join(sorted({m for _, m in every}))})")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def plan(table: int, scale: str, seeds: int, cells: list[str], results_dir: Path, runs_dir: Path, jobs: int = 1,
         threads: int | None = None, cuda_graphs: bool = False, slurm_gpus: int | None = None) -> list[PlannedRun]:
    """The table's runs with their state and cost. `jobs` and `threads` are the local launcher's: each run gets
    `threads` CPU threads, else the cores divided among the runs that go at once, and a cost is first read from
    earlier stretches of training at that many threads on this machine (a run's pace differs with its threads),
    made with CUDA graphs or without as `cuda_graphs` says (on a GPU they set the pace as much); a run training now
    in another process is estimated at its own pace, from its log, and so is an interrupted one nothing else tells of.
    Runs for SLURM (`slurm_gpus` GPUs a job) train on machines unknown here: their cost is read only from whole runs
    made on that many GPUs, wherever, never from this machine's pace."""
    if table not in SPECS:
        raise ValueError(f"table {table}: tables 1-6, 9, 10 and 11 (the extension) are made of runs (7 and 8 are "
                         f"rendered from recipes and records)")
    if seeds < 1:
        raise ValueError(f"--seeds {seeds}: expected at least 1")
    spec = SPECS[table]
    records = [r for r in load_records(results_dir, scale) if not r.get("overrides") and r.get("duration_s")]
    timed = [r for r in records if bool(r.get("cuda_graphs")) == cuda_graphs]
    calibrated = calibration_timings(results_dir, scale)
    here = machine(provenance.hardware())
    # a record is this machine's whole-run timing only if every stretch of it was trained here (a run begun on a GPU
    # and finished here took neither's time)
    mine = lambda records: [r for r in records if machines_of(r) == {here}]
    pools = ((mine(timed), ""), (timed, "other machines"),
             (mine(calibrated), "calibration runs"), (calibrated, "calibration runs, other machines"))
    if slurm_gpus is not None:
        on = lambda records: [r for r in records if {hw.get("gpus", 0) for hw in stretch_hardware(r)} == {slurm_gpus}]
        pools = ((on(timed), f"{slurm_gpus}-GPU runs"), (on(calibrated), f"calibration runs, {slurm_gpus}-GPU"))
    out = []
    for group, method in parse_cells(table, cells):
        name = spec.recipe_name(group, method)
        if not (recipes_dir() / f"{name}.yaml").is_file():
            raise ValueError(f"recipes/{name}.yaml: no such recipe (table {table}'s {group} {method} cell: add the "
                             f"recipe, docs/code-map.md says how)")
        if current_hash(name, scale) is None:
            raise ValueError(f"recipes/{name}.yaml: no {scale!r} scale in this recipe")
        for seed in range(1, seeds + 1):
            run = PlannedRun(name, scale, seed, run_folder(runs_dir, name, scale, seed))
            run.state, run.detail = run_state(run, results_dir)
            out.append(run)
    threads = threads or launch_threads(out, jobs)
    rates = measured_rates() if scale == "paper" else []
    gpus = slurm_gpus or max(_local_gpus(), 1)
    paces = stretch_paces(records + calibrated, threads, here, cuda_graphs) if slurm_gpus is None else []
    # runs training now go at their own pace, which also tells their depth's cost where nothing recorded does
    now = {r.name: pace for r in out if r.state == "running" and (pace := own_pace(r)) is not None}
    depths_now = {depth(r.recipe_name): now[r.name] for r in out if r.name in now} if slurm_gpus is None else {}
    for run in out:
        if run.state == "done":
            run.took_s = next((r["duration_s"] for r in records if r["recipe_name"] == run.recipe_name
                               and r.get("seed") == run.seed), None)
        if run.name in now:
            run.estimate_s = now[run.name] * max(recipe_updates(run.recipe_name, scale) - logged_update(run.run_dir), 0)
            run.estimate_from = "its own pace"
            continue
        durations, source = estimate(run.recipe_name, scale, threads, paces, pools, depths_now)
        if not durations and run.state == "partial" and slurm_gpus is None and (pace := own_pace(run)) is not None:
            # nothing else tells: the pace its own log kept, on whatever machine and threads trained it (not for
            # SLURM, whose costs are never read from this machine's pace)
            durations, source = [pace * recipe_updates(run.recipe_name, scale)], "its log so far"
        run.estimate_s, run.estimate_from = (statistics.fmean(durations) if durations else None), source
        if run.estimate_s is None and scale == "paper":  # nothing recorded: the rates measured in benchmarks/
            run.estimate_s, run.estimate_from = measured_estimate(run.recipe_name, scale, gpus, rates)
        if run.estimate_s and run.state in ("partial", "running"):
            run.estimate_s *= 1 - trained_fraction(run)  # the time still to go, not the whole run's
    return out


def _local_gpus() -> int:
    import torch
    return torch.cuda.device_count()


def own_pace(run: PlannedRun) -> float | None:
    """Seconds per update of a run training now (or interrupted), from its log's newest rows: its own machine,
    threads and neighbours, which earlier runs' paces cannot know. Their time counts training only, carried across a
    resume (which cuts the log back to its checkpoint). None before its log has two timed rows."""
    from repro.launch import newest_log_rows
    rows = [r for r in newest_log_rows(run.run_dir) if "step" in r and "time" in r]
    if len(rows) < 2 or rows[-1]["step"] <= rows[0]["step"]:
        return None
    return (rows[-1]["time"] - rows[0]["time"]) / (rows[-1]["step"] - rows[0]["step"])


def run_state(run: PlannedRun, results_dir: Path) -> tuple[str, str]:
    path = record_path(results_dir, run.scale, run.recipe_name, run.seed)
    if path.is_file():
        rec = read_json(path)
        if rec.get("recipe_hash") == current_hash(run.recipe_name, run.scale):
            if rec["status"] == "failed":
                return "done", f"training failed: {rec.get('reason', '')}"
            if rec.get("metrics"):
                return "done", "evaluated"
        else:
            return "missing", f"a stale record ({rec.get('recipe_hash')}) will be refused: git rm {path}"
    status = run.run_dir / "status.json"
    if status.is_file():
        return "partial", f"trained ({read_json(status).get('status', '?')}), not evaluated"
    pid = lock_holder(run.run_dir)
    if pid:
        step = logged_update(run.run_dir)
        return "running", f"training in process {pid}, at update {step:,} ({share(run, step):.0%} done)"
    last = last_checkpoint(run.run_dir)
    if last:
        return "partial", f"resumable from checkpoint_{last}.pt ({share(run, last):.0%} done)"
    return "missing", ""


def to_launch(runs: list[PlannedRun]) -> list[PlannedRun]:
    """The runs to start or resume: not done, and not training in another process now."""
    return [r for r in runs if r.state in ("partial", "missing")]


def launch_threads(runs: list[PlannedRun], jobs: int) -> int:
    """CPU threads for each run a local command starts: the cores divided among the runs it trains at once and those
    training in other processes (here, as their locks are)."""
    from repro.launch import default_threads
    return default_threads(min(jobs, len(to_launch(runs))) + sum(r.state == "running" for r in runs))


def last_checkpoint(run_dir: Path) -> int | None:
    """The step of a run directory's latest checkpoint (by number: checkpoint_10000 comes after checkpoint_9500)."""
    if not run_dir.is_dir():
        return None
    from repro.train.checkpoint import resumable, step_of  # torch: only where a run folder exists
    ckpts = resumable(run_dir)
    return step_of(ckpts[-1]) if ckpts else None


def trained_fraction(run: PlannedRun) -> float:
    """How much of a run's training is behind it: 1 once trained (evaluation, seconds, is left), else, while it
    trains, its log's newest update's share of the recipe's updates, else its last checkpoint's (checkpoint_4500 of
    12,000: 0.375)."""
    if (run.run_dir / "status.json").is_file():
        return 1.0
    return share(run, logged_update(run.run_dir) if run.state == "running" else last_checkpoint(run.run_dir))


def share(run: PlannedRun, update: int | None) -> float:
    """`update`'s share of the run's recipe's updates."""
    return min(update / recipe_updates(run.recipe_name, run.scale), 1.0) if update else 0.0


def logged_update(run_dir: Path) -> int:
    from repro.launch import newest_log_row
    return (newest_log_row(run_dir) or {}).get("step", 0)


def stale_records(runs: list[PlannedRun]) -> list[str]:
    return [r.detail.split("git rm ")[-1] for r in runs if r.detail.startswith("a stale record")]


def job_steps(run: PlannedRun, results_dir: Path, data_root: Path, train_flags: tuple = ()) -> list[list[str]]:
    """Absolute paths: a cluster job need not start in the folder it was submitted from. `train_flags` go to the
    train step alone (--cuda-graphs)."""
    common = ["--root", str(Path(data_root).resolve()), "--results", str(Path(results_dir).resolve())]
    run_dir = str(run.run_dir.resolve())
    train = ["train", str(run.recipe.resolve()), "--scale", run.scale, "--seed", str(run.seed), "--run-dir", run_dir,
             "--resume", *common, *train_flags]
    evaluate = ["evaluate", run_dir, *common]
    status = run.run_dir / "status.json"
    return [evaluate] if status.is_file() else [train, evaluate]


def check_graphable_runs(runs: list[PlannedRun], on_gpu: bool) -> None:
    """Raise the first run's reason (one line, naming it) why its batches cannot be replayed as CUDA graphs where
    they will train: on this machine's device, or on a GPU (`on_gpu`)."""
    import torch

    from repro.config import resolve
    from repro.train.graphs import check_graphable
    device = "cuda" if on_gpu or torch.cuda.is_available() else "cpu"
    for run in to_launch(runs):
        try:
            check_graphable(resolve(run.recipe, run.scale).recipe, device, 1)
        except ValueError as e:
            raise ValueError(f"{run.name}: {e}") from None


GROUPING = ("auto", "group", "no-group")


def groupable(run: PlannedRun) -> bool:
    """Whether the recipe's seeds can train as one group (repro/train/group.py: the task, precision, compile)."""
    from repro.config import resolve
    from repro.train.group import check_group
    res = resolve(run.recipe, run.scale)
    try:
        check_group([res, res], 1, False)
    except ValueError:
        return False
    return True


def lanes(runs: list[PlannedRun], grouping: str, on_gpu: bool, train_flags: tuple = ()) -> list[list[PlannedRun]]:
    """The processes a launch starts, each a list of runs: one run each, or, grouping, a cell's missing seeds
    together as one batched model (`train --seeds`). A partial run resumes alone (its seeds' progress differs).
    "auto" groups on a GPU only: on a CPU a group is slower per member than one process per run
    (benchmarks/README.md, "Grouped seeds"). --cuda-graphs and --tokens-per-gpu are standalone runs' options."""
    todo = to_launch(runs)
    if grouping not in GROUPING:
        raise ValueError(f"grouping {grouping!r}: expected one of {', '.join(GROUPING)}")
    if grouping == "no-group" or (grouping == "auto" and (not on_gpu or train_flags)):
        return [[r] for r in todo]
    if train_flags:
        raise ValueError(f"--group trains seeds as one model, which {' '.join(train_flags[:1])} does not apply to")
    out, cells = [], {}
    for r in todo:
        if r.state == "missing" and groupable(r):
            if r.recipe_name not in cells:
                cells[r.recipe_name] = []
                out.append(cells[r.recipe_name])
            cells[r.recipe_name].append(r)
        else:
            out.append([r])
    return out


def lane_steps(lane: list[PlannedRun], results_dir: Path, data_root: Path,
               train_flags: tuple = ()) -> list[list[str]]:
    """A lane's `lnrepro` steps: a run's train and evaluate (`job_steps`), or a group's one train and each seed's
    evaluate."""
    if len(lane) == 1:
        return job_steps(lane[0], results_dir, data_root, train_flags)
    common = ["--root", str(Path(data_root).resolve()), "--results", str(Path(results_dir).resolve())]
    first = lane[0]
    train = ["train", str(first.recipe.resolve()), "--scale", first.scale, "--seeds",
             ",".join(str(r.seed) for r in lane), "--run-dir", str(first.run_dir.parent.resolve()), "--resume",
             *common]
    return [train] + [["evaluate", str(r.run_dir.resolve()), *common] for r in lane]


def lane_name(lane: list[PlannedRun]) -> str:
    return lane[0].name if len(lane) == 1 else f"{lane[0].recipe_name}-{lane[0].scale}-s" + \
        ",".join(str(r.seed) for r in lane)


def local_jobs(runs: list[PlannedRun], results_dir: Path, data_root: Path, train_flags: tuple = (),
               grouping: str = "no-group", on_gpu: bool = False):
    from repro.launch import Job
    return [Job(lane_name(lane), lane_steps(lane, results_dir, data_root, train_flags),
                lane[0].run_dir / "reproduce.out", lane[0].run_dir, recipe_updates(lane[0].recipe_name, lane[0].scale))
            for lane in lanes(runs, grouping, on_gpu, train_flags)]


# -- SLURM through submitit -----------------------------------------------------------------------------------

def _run_steps(steps: list[list[str]], gpus: int) -> None:
    """Inside a SLURM (or local submitit) job: each step as a process; training under torchrun with several GPUs."""
    import subprocess
    import sys
    for step in steps:
        if step[0] == "train" and gpus > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
                   "-m", "repro.cli", *step]
        else:
            cmd = [sys.executable, "-m", "repro.cli", *step]
        subprocess.run(cmd, check=True)


def submit(runs: list[PlannedRun], results_dir: Path, data_root: Path, folder: Path, slurm: dict,
           local: bool = False, train_flags: tuple = (), grouping: str = "no-group") -> list:
    """One submitit job per run; `local` uses submitit's LocalExecutor (same code path, no cluster)."""
    import shutil
    if not local and (shutil.which("srun") is None or shutil.which("sbatch") is None):
        raise ValueError("--launcher slurm: no SLURM here (srun and sbatch not found); `--launcher "
                         "submitit-local` runs the same path on this machine")
    try:
        import submitit
    except ImportError:
        raise ValueError("--launcher slurm needs submitit: pip install 'lnrepro[slurm]'") from None
    gpus = int(slurm.get("gpus", 1))
    if local:
        executor = submitit.LocalExecutor(folder=str(folder))
        executor.update_parameters(timeout_min=int(slurm.get("time", 60)), gpus_per_node=0)
    else:
        executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
        params = {"timeout_min": int(slurm.get("time", 60)), "gpus_per_node": gpus, "tasks_per_node": 1,
                  "cpus_per_task": int(slurm.get("cpus", 8)), "nodes": 1, "name": "lnrepro"}
        for key in ("partition", "account", "qos", "constraint"):
            if slurm.get(key):
                params[f"slurm_{key}"] = slurm[key]
        executor.update_parameters(**params)
    return [executor.submit(_run_steps, lane_steps(lane, results_dir, data_root, train_flags), gpus)
            for lane in lanes(runs, grouping, on_gpu=gpus > 0 and not local, train_flags=train_flags)]


SLURM_KEYS = ("partition", "account", "qos", "constraint", "time", "gpus", "cpus")
SLURM_COUNTS = {"time": 1, "gpus": 0, "cpus": 1}  # the numeric settings and their least values (a CPU cluster: 0 GPUs)


def slurm_settings(config: Path | None, flags: dict) -> dict:
    """Settings from a small YAML (keys: partition, account, qos, constraint, time in minutes, gpus, cpus), then
    the command-line flags over it; a count that is no whole number names where it came from."""
    settings: dict = {}
    if config is not None:
        import yaml
        try:
            data = yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise ValueError(f"{config}: not a readable YAML file ({type(e).__name__})") from None
        if not isinstance(data, dict) or set(data) - set(SLURM_KEYS):
            bad = sorted(set(data) - set(SLURM_KEYS)) if isinstance(data, dict) else data
            raise ValueError(f"{config}: unknown SLURM settings {bad} (expected keys {', '.join(SLURM_KEYS)})")
        settings.update(data)
    given = {k: v for k, v in flags.items() if v is not None}
    settings.update(given)
    for key, least in SLURM_COUNTS.items():
        value = settings.get(key, least)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            source = f"--{key}" if key in given else f"{config}: {key}"
            raise ValueError(f"{source} {value!r}: expected a whole number of at least {least}")
    return settings


def describe_plan(runs: list[PlannedRun], jobs: int = 1, grouped: list[list[PlannedRun]] | None = None,
                  device: str = "cpu") -> str:
    from repro.tables.render import plain_table, wrap
    body = []
    for r in runs:
        est = "cost unknown"
        if r.state == "done":  # what it took, not what it would cost
            est = f"took {r.took_s / 60:.0f} min" if r.took_s else "done"
        elif r.estimate_s is not None:
            est = f"~{r.estimate_s / 60:.0f} min" + (f" ({r.estimate_from})" if r.estimate_from else "")
        detail = r.detail if r.estimate_s is not None or not r.estimate_from or r.state == "done" else \
            "; ".join(x for x in (r.detail, r.estimate_from) if x)
        body.append([r.state, r.name, est, detail])
    lines = [plain_table(["state", "run", "cost", "detail"], body).rstrip("\n")] if body else []
    todo = [r for r in runs if r.state != "done"]
    # a cost read from other machines' records is no time on this one: shown per run, left out of the totals
    priced = lambda r: r.estimate_s is not None and "other machines" not in r.estimate_from
    known = [r.estimate_s for r in todo if priced(r)]
    foreign = [r.estimate_s for r in todo if r.estimate_s is not None and not priced(r)]
    total = f"; about {sum(known) / 3600:.1f} h of runs where earlier runs tell" if known else ""
    groups = [lane for lane in grouped or [] if len(lane) > 1]
    if groups:
        # a group's time: its members' runs at the gain measured for its size on this device, else no gain
        gains = {len(g): group_gain(len(g), device) for g in groups}
        lane_s = [sum(r.estimate_s for r in lane) / (gains.get(len(lane)) or 1.0) if len(lane) > 1
                  else lane[0].estimate_s for lane in grouped if all(priced(r) for r in lane)]
        measured = ", ".join(f"{n} seeds {g:.1f}x" for n, g in sorted(gains.items()) if g)
        plural = "s" if len(groups) > 1 else ""
        lines.append(wrap(
            f"grouped: {sum(len(g) for g in groups)} runs train as {len(groups)} group{plural} of seeds, "
            f"one process each (--no-group: one process per run); "
            + (f"measured gain on {device}: {measured}" if measured else
               f"no group gain measured on {device} (benchmarks/group_step.py), none assumed")))
        known = lane_s
        if known:
            total = f"; about {sum(known) / 3600:.1f} h of processes where earlier runs tell"
    if known and jobs > 1:
        total += f", {wall_time(known, jobs) / 3600:.1f} h of wall time at {jobs} at once"
    if foreign:
        total += (f"; {len(foreign)} run{'s' if len(foreign) > 1 else ''} priced from other machines only, not in "
                  f"the total (about {sum(foreign) / 3600:.1f} h there)")
    counts = ", ".join(f"{sum(r.state == s for r in runs)} {s}" for s in ("done", "running", "partial", "missing")
                       if s != "running" or any(r.state == s for r in runs))
    return "\n".join(lines + [wrap(f"{len(runs)} runs: {counts}{total}")]) + "\n"


def device_name(on_gpu: bool) -> str:
    """The device a launch trains on, as benchmarks/group_step.py names it: a GPU's name, else "cpu"."""
    if on_gpu and _local_gpus():
        import torch
        return torch.cuda.get_device_name(0)
    return "cpu"
