"""Calibration v1 (2026-11-26), frozen: the warmup of each task's `mini` regime chosen on the two baselines alone,
the setting whose baselines converge with the lowest mean best validation NLL (recipes/calibration/TASK.yaml). It
still decides its records and is tested; calibration v2 (repro/calibration.py) replaced it."""

from __future__ import annotations

import statistics
from pathlib import Path

from repro.calibration import (CalibrationSpec, base_label, best_until, collect_runs, finished, job_runs, kept_choice,
                               load_spec, recorded_run, setting_length, train_job, write_choice)
from repro.figures.output import save_figure
from repro.launch import default_threads, run_jobs
from repro.pace import grid_cost
from repro.progress import console


def settings(spec: CalibrationSpec) -> list[tuple[int, float]]:
    """v1's grid: (warmup, lr) of every point, the order ties are broken in."""
    return [(w, lr) for lr in spec.lr for w in spec.warmup_updates]


def run(task: str, jobs_at_once: int, threads: int | None, decide_only: bool, train_grid: bool, runs: Path,
        root: Path, results: Path) -> dict:
    """`lnrepro calibrate TASK --rules v1`: train what the grid lacks (unless its records decide), then apply the
    rule and show every setting's outcome; a spec or run that fails is a ValueError of one line."""
    spec = load_spec(Path("recipes/calibration") / f"{task}.yaml")
    out_dir = results / spec.scale / "calibration" / task
    committed = recorded_runs(spec, out_dir)
    if not decide_only and not train_grid and committed == len(settings(spec)) * len(spec.baselines):
        console.print(f"deciding from the {committed} committed calibration records in {out_dir} (`lnrepro calibrate "
                      f"{task} --train` trains the grid again)", markup=False, highlight=False)
        decide_only = True
    if not decide_only:
        todo = jobs(spec, runs / task, root)
        threads_each = threads or default_threads(jobs_at_once, len(todo))
        console.print(f"{len(todo)} calibration runs to train ({len(settings(spec)) * 2 - len(todo)} already "
                      f"finished), {spec.max_updates:,} updates each, {min(jobs_at_once, len(todo) or 1)} at once: "
                      + grid_cost(spec.scale, job_runs(spec, todo), results, threads_each,
                                              jobs_at_once), markup=False, highlight=False)
        # Each run's record is written as the run ends, so a grid stopped part-way keeps what finished.
        done = run_jobs(todo, jobs_at_once, threads_each,
                        on_finish=lambda job: collect(spec, runs / task, out_dir))
        collect(spec, runs / task, out_dir)  # also runs that finished in an earlier, stopped call
        bad = [j.name for j in done if j.state != "done"]
        if bad:
            raise ValueError(f"calibration runs did not finish: {', '.join(bad)} (logs: {runs / task}/*/train.out)")
    if not (out_dir.is_dir() and any(out_dir.glob("*.log.jsonl"))):
        raise ValueError(f"{out_dir}: no calibration records; run `lnrepro calibrate {task}` first")
    decision = decide(spec, out_dir, out_dir / "curves.png")
    from rich.table import Table
    t = Table(title=f"Calibration of the {spec.scale} regime for {task} (rule: repro/calibration_v1.py)")
    for col in ("warmup", "lr", "converged at", "mean best valid NLL", "excluded"):
        t.add_column(col)
    for r in decision["settings"]:
        t.add_row(str(r["warmup_updates"]), f"{r['lr']:g}", str(r["length"] or "—"),
                  f"{r['mean_best_valid_nll']:.3f}" if r["mean_best_valid_nll"] else "—", r["excluded"])
    console.print(t)
    c, p = decision["choice"], decision["provisional"]
    if decision.get("incomplete"):
        console.print(f"grid incomplete ({len(decision['incomplete'])} settings not run): no choice yet; "
                      f"`lnrepro calibrate {task}` trains the rest (curves so far: {out_dir / 'curves.png'})")
    elif c:
        console.print(f"choice: warmup {c['warmup_updates']}, lr {c['lr']:g}, max_updates {c['max_updates']} "
                      f"({out_dir / 'choice.json'})")
    else:
        console.print("no setting converged within the cap" + (
            f"; provisional (lowest mean best NLL at the cap): warmup {p['warmup_updates']}, lr {p['lr']:g}, "
            f"max_updates {p['max_updates']}; calibrate again with a larger cap" if p else ""))
    return decision


def jobs(spec: CalibrationSpec, runs_dir: Path, data_root: Path) -> list:
    """One `train` job per (baseline, setting); a finished run is skipped, an interrupted one resumes."""
    return [train_job(spec, name, (warmup, lr, 1), runs_dir, data_root) for warmup, lr in settings(spec)
            for name in spec.baselines if not finished(runs_dir / base_label(name, warmup, lr))]


def choose(spec: CalibrationSpec, curves: dict[tuple[int, float], dict[str, list]],
           failed: dict[tuple[int, float], list[str]]) -> dict:
    """Apply the rule to every setting; returns each setting's outcome and the choice (None if no setting qualifies)."""
    rows = []
    for (warmup, lr) in settings(spec):
        c = curves.get((warmup, lr), {})
        row = {"warmup_updates": warmup, "lr": lr, "length": None, "mean_best_valid_nll": None,
               "best_valid_nll": {}, "excluded": ""}
        if failed.get((warmup, lr)):
            row["excluded"] = "failed: " + ", ".join(failed[(warmup, lr)])
        elif any(not c.get(b) for b in spec.baselines):
            row["excluded"] = "not run"
        else:
            length = setting_length([c[b] for b in spec.baselines], warmup, spec)
            if length is None:
                row["excluded"] = f"not converged within {spec.max_updates} updates"
            else:
                best = {b: best_until(c[b], length) for b in spec.baselines}
                row.update(length=length, best_valid_nll=best, mean_best_valid_nll=statistics.fmean(best.values()))
        rows.append(row)
    incomplete = [(r["warmup_updates"], r["lr"]) for r in rows if r["excluded"] == "not run"]
    chosen = at_cap = None
    if not incomplete:  # a choice among the settings that happened to finish first would be another rule
        chosen = min((r for r in rows if r["length"] is not None),
                     key=lambda r: (round(r["mean_best_valid_nll"], 6), r["length"], r["warmup_updates"]), default=None)
        ran = [] if chosen else [
            (statistics.fmean(best_until(curves[k][b], spec.max_updates) for b in spec.baselines), k)
            for k in settings(spec) if not failed.get(k)]
        if ran:
            mean, (warmup, lr) = min(ran, key=lambda x: (round(x[0], 6), x[1][0]))
            at_cap = {"warmup_updates": warmup, "lr": lr, "max_updates": spec.max_updates,
                      "mean_best_valid_nll": mean, "converged": False}
    decision = {"settings": rows, "choice": None if chosen is None else
                {"warmup_updates": chosen["warmup_updates"], "lr": chosen["lr"], "max_updates": chosen["length"]},
                "provisional": at_cap}
    if incomplete:  # absent on a whole grid, so that the choices already recorded read the same
        decision["incomplete"] = [{"warmup_updates": w, "lr": lr} for w, lr in incomplete]
    return decision


def recorded_runs(spec: CalibrationSpec, out_dir: Path) -> int:
    """How many of the grid's runs have a record in out_dir."""
    return sum((Path(out_dir) / f"{base_label(name, w, lr)}.json").is_file() for w, lr in settings(spec)
               for name in spec.baselines)


def collect(spec: CalibrationSpec, runs_dir: Path, out_dir: Path) -> None:
    """Copy each finished calibration run's record and its training log into out_dir (`collect_runs`)."""
    collect_runs([(base_label(name, warmup, lr), {"recipe_name": name, "task": spec.task, "warmup_updates": warmup,
                                             "lr": lr}) for warmup, lr in settings(spec) for name in spec.baselines],
                 runs_dir, out_dir)


def load_curves(spec: CalibrationSpec, out_dir: Path):
    curves: dict = {}
    failed: dict = {}
    for warmup, lr in settings(spec):
        for name in spec.baselines:
            got = recorded_run(out_dir, base_label(name, warmup, lr))
            if got is None:
                continue
            status, reason, curve = got
            curves.setdefault((warmup, lr), {})[name] = curve
            if status == "failed":
                failed.setdefault((warmup, lr), []).append(f"{name} ({reason})")
    return curves, failed


def decide(spec: CalibrationSpec, out_dir: Path, png: Path) -> dict:
    """The rule applied to the committed records: writes choice.json and the curves PNG; returns the decision.

    On an incomplete grid only the curves so far are drawn: choice.json is written once every setting has run.
    """
    curves, failed = load_curves(spec, out_dir)
    decision = choose(spec, curves, failed)
    decision.update({"task": spec.task, "scale": spec.scale, "spec": str(spec.path), "baselines": list(spec.baselines),
                     "rule": {"window_fraction": spec.window_fraction, "tolerance": spec.tolerance,
                              "cap": spec.max_updates}})
    if decision.get("incomplete"):
        plot(spec, curves, decision, png)
        return decision
    kept = kept_choice(out_dir / "choice.json", decision)
    if kept is not None and png.is_file():
        return kept
    write_choice(out_dir / "choice.json", decision)
    plot(spec, curves, decision, png)
    return decision


def plot(spec: CalibrationSpec, curves: dict, decision: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(spec.baselines), figsize=(6 * len(spec.baselines), 4.2), sharey=True)
    rows = {(r["warmup_updates"], r["lr"]): r for r in decision["settings"]}
    for ax, name in zip(axes, spec.baselines):
        for setting in settings(spec):
            curve = curves.get(setting, {}).get(name)
            if not curve:
                continue
            xs, ys = zip(*curve)
            line, = ax.plot(xs, ys, label=f"warmup {setting[0]}, lr {setting[1]:g}")
            length = rows[setting]["length"]
            if length is not None:
                ax.axvline(length, color=line.get_color(), linestyle=":", linewidth=1)
        ax.set_title(name)
        ax.set_xlabel("updates")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("validation NLL (nats, shared axis)")
    c, p, todo = decision["choice"], decision.get("provisional"), decision.get("incomplete")
    missing = "; ".join(f"warmup {t['warmup_updates']}, lr {t['lr']:g}" for t in todo or [])
    chosen = (f"grid incomplete, no choice yet; not run: {missing}" if todo else
              f"chosen: warmup {c['warmup_updates']}, lr {c['lr']:g}, {c['max_updates']} updates" if c else
              f"no setting converged within the cap; provisional: warmup {p['warmup_updates']}, lr {p['lr']:g}, "
              f"{p['max_updates']} updates (lowest mean at the cap)" if p else "no setting converged within the cap")
    fig.suptitle(f"Calibration of the {spec.scale} regime, {spec.task}: validation NLL of the baselines "
                 f"(dotted: where both converged)\n{chosen}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, png, None, {})
