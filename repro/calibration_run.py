"""What `lnrepro calibrate TASK` does under calibration v2 and v2.1: train the grid settings the rule asks for
(grouped where asked, or on a GPU), then the deepest Pre-LN run it needs, each record collected as its run ends and
settled runs asked to stop; then the decision, shown setting by setting. A spec, option or run that fails is a
ValueError (RecipeError, OSError) of one line."""

from __future__ import annotations

from pathlib import Path

from repro import calibration, calibration_v1, calibration_v2_1, pace
from repro.config import resolve
from repro.launch import default_threads, run_jobs
from repro.progress import console
from repro.options import check_jobs


def calibrate(task: str, rules: str, jobs: int | None, threads: int | None, decide_only: bool, train_grid: bool,
              runs: Path, root: Path, results: Path, group: bool | None, train_group: str | None,
              tokens_factor: int | None, cuda_graphs: bool, one_forward: bool, setting: str | None) -> None:
    """`lnrepro calibrate TASK`: its options checked, the rules of version `rules` (v1's or v2's, `run`) applied,
    `jobs` at once (default one per core)."""
    import os
    if task not in calibration.TASKS:
        raise ValueError(f"calibrate {task!r}: unknown task (expected one of {', '.join(calibration.TASKS)})")
    check_jobs(jobs)
    jobs = jobs if jobs is not None else os.cpu_count() or 1
    if rules not in ("v1", "v2"):
        raise ValueError(f"--rules {rules!r}: expected v1 or v2")
    if rules == "v1":
        return calibration_v1.run(task, jobs, threads, decide_only, train_grid, runs, root, results)
    # a grouped grid's jobs name their task's own runs folder
    run(task, jobs, threads, decide_only, runs if train_group else runs / "v2" / task, root, results, group,
        train_group, tokens_factor, cuda_graphs, one_forward, setting)


def run(task: str, jobs: int, threads: int | None, decide_only: bool, runs: Path, root: Path, results: Path,
                 group: bool | None, train_group: str | None, tokens_factor: int | None = None,
                 cuda_graphs: bool = False, one_forward: bool = False, setting: str | None = None) -> None:
    """`lnrepro calibrate TASK` (rules v2, v2.1 choosing what runs): the grid (grouped where asked, or on a GPU), then the deepest Pre-LN runs the rule
    asks for one by one, each record collected as its run ends; then the decision. `tokens_factor`, or `setting`
    (a label's suffix, w1000-lr0.0005-x4), trains those settings alone (and no deepest Pre-LN run, which waits for
    the whole grid)."""
    import torch

    spec = calibration.load_spec(Path("recipes/calibration/v2") / f"{task}.yaml")
    out_dir = results / spec.scale / "calibration" / "v2" / task
    collect = lambda *_: calibration.collect_runs(calibration.entries(spec), runs, out_dir)

    def stop_settled() -> None:
        for name in calibration.stop_settled(spec, runs, out_dir):
            console.print(f"asked {name} to stop at its next log line: its setting is settled", markup=False,
                          highlight=False)
    if train_group is not None:
        name, _, k = train_group.rpartition(":")
        if name not in spec.baselines or not k.isdigit() or int(k) not in spec.tokens_factor:
            raise ValueError(f"--train-group {train_group!r}: expected BASELINE:K of {spec.path}")
        return calibration.train_grid_group(spec, name, int(k), runs, root, out_dir)
    if tokens_factor is not None and tokens_factor not in spec.tokens_factor:
        raise ValueError(f"--tokens-factor {tokens_factor}: {spec.path} has tokens factors "
                         + ", ".join(map(str, spec.tokens_factor)))
    if tokens_factor is not None and setting is not None:
        raise ValueError("--setting and --tokens-factor: give one")
    only = ([st for st in spec.settings() if st[2] == tokens_factor] if tokens_factor is not None else
            [calibration.parse_setting(spec, setting)] if setting is not None else None)
    grouped = torch.cuda.is_available() and not (cuda_graphs or one_forward) if group is None else group
    for flag, on in (("--cuda-graphs", cuda_graphs), ("--one-forward", one_forward)):
        if on and grouped:
            raise ValueError(f"{flag} trains one run per process: add --no-group")
    if cuda_graphs:  # refused here, before any job starts, rather than by each run
        from repro.train.graphs import check_graphable
        check_graphable(resolve(calibration.recipe_path(spec, spec.baselines[0]), spec.scale).recipe,
                        "cuda" if torch.cuda.is_available() else "cpu", 1)
    flags = ["--cuda-graphs"] if cuda_graphs else []
    evaluate = calibration_v2_1.x1_first(spec)
    while not decide_only:
        wanted = only if only is not None else calibration_v2_1.settings_to_train(
            spec, calibration_v2_1.decision(spec, out_dir, results))
        todo = (calibration.jobs(spec, task, runs, root, grouped, out_dir, results, wanted, flags, one_forward,
                                    evaluate) if wanted else [])
        decision = calibration_v2_1.decide(spec, out_dir, results) if not todo else None
        if decision is not None and decision.get("deep_needed") and only is None:
            need = decision["deep_needed"]
            deep_at = (need["warmup_updates"], need["lr"], need["tokens_factor"])
            todo = [calibration.train_job(spec, spec.deep_pre_ln, deep_at, runs, root, need["max_updates"],
                                          flags, one_forward, evaluate)]
        if not todo:
            break
        runs_of = calibration.job_runs(spec, todo)
        cost = ("grouped jobs are not priced (a group's pace is not a run's)" if runs_of is None else
                pace.grid_cost(spec.scale, runs_of, results, threads or default_threads(jobs, len(todo)),
                                      jobs, cuda_graphs) + " (at most: a run stops once its setting is settled)")
        console.print(f"{len(todo)} calibration job(s) to run ({'grouped' if grouped else 'one run each'}): "
                      + ", ".join(j.name for j in todo) + f"; {cost}", markup=False, highlight=False,
                      soft_wrap=True)
        # settled runs are looked for every 10 s: on a GPU a run trains hundreds of updates a minute
        done = run_jobs(todo, jobs, threads or default_threads(jobs, len(todo)), on_finish=collect,
                        on_tick=stop_settled, tick_s=10.0)
        collect()
        bad = [j.name for j in done if j.state != "done"]
        if bad:
            raise ValueError(f"calibration runs did not finish: {', '.join(bad)} (logs under {runs})")
    collect()
    decision = calibration_v2_1.decide(spec, out_dir, results)
    show(spec, task, decision, out_dir)


def show(spec: calibration.CalibrationSpec, task: str, decision: dict, out_dir: Path) -> None:
    """The decision setting by setting, in 80 columns, and its outcome in one line."""
    from rich.table import Table
    t = Table(title=f"Calibration of the {spec.scale} regime for {task} ({decision['rules']})",
              box=None, padding=(0, 1, 0, 0), header_style="bold underline")  # nine columns in 80 characters
    short = lambda name: name.rsplit("/", 1)[-1]  # the recipe without its task folder: narrower columns
    variant = lambda name: name.rsplit("-", 1)[-1]  # a baseline by its variant: both are the shallow depth
    # numbers at their own width, the text columns share what is left
    widths = {"warmup": 6, "lr": 6, "tokens": 6, "length": 6, **{variant(b): 7 for b in spec.baselines},
              "regret": 6}
    for col, width in widths.items():
        t.add_column(col, overflow="fold", width=width)
    for col in (short(spec.deep_pre_ln), "excluded"):
        t.add_column(col, overflow="fold", ratio=1)
    for r in decision["settings"]:
        best = [f"{r['best_valid_nll'][b]:.3f}" if b in r["best_valid_nll"] else "—" for b in spec.baselines]
        length = "—" if r["length"] is None else f"{r['length']}" + ("" if r["converged"] else " (cap)")
        excluded = r["excluded"]
        excluded = excluded.replace(spec.deep_pre_ln, short(spec.deep_pre_ln))
        for name in spec.baselines:
            excluded = excluded.replace(name, variant(name))
        t.add_row(str(r["warmup_updates"]), f"{r['lr']:g}", f"x{r['tokens_factor']}", length, *best,
                  "—" if r["regret"] is None else f"{r['regret']:.3f}", r["deep_pre_ln"], excluded)
    console.print(t)
    n = len(decision.get("incomplete") or [])
    lack = "1 setting lacks a run" if n == 1 else f"{n} settings lack a run"
    where = (f" ({out_dir / 'choice.json'})" if decision["choice"] or decision["not_informative"] else
             f" ({lack}; `lnrepro calibrate {task}` trains {'it' if n == 1 else 'them'})" if n else
             f" (`lnrepro calibrate {task}` runs it)")
    console.print(calibration_v2_1.outcome(spec, decision) + where, markup=False, highlight=False)
