"""The evidence as a queue (`lnrepro queue`): the runs the claims still need, grouped into decisive sets and ordered
by claims decided per priced hour, and worked down in lanes whose run folders outlive a session.

- A decisive set is what takes one claim to its next verdict or planned look: the runs its own verdict asks for
  (repro/needed.py: claim_missing, under the judging rules in force), or one calibration setting's runs of a task
  whose regime is undecided (repro/calibration_v2_1.py says which settings it trains now).
- Order: calibration of an undecided task first (every record of that task waits for it); then the claim sets,
  most claims decided per hour first, each priced at this machine's pace where the records keep one (a depth it
  never trained at another machine's of its kind, scaled by their ratio on the depths both trained:
  pace.scaled_paces; the CPU times per batch benchmarks/mini_step.py --paces measured count as one more machine
  there: pace.measured_paces, and price a machine with no record yet), else at the fastest machine of the kind here
  (a GPU's where one is present; a CPU's at one thread, each priced so too) that priced it; runs another set
  already queued are not paid twice, and a run stopped part-way is paid for the updates it has left. Sets nobody
  priced come after the priced ones, fewest runs first. Claims of a task whose regime is undecided wait: their runs
  could go stale when it is decided.
- `--run` trains the queued runs in that order (runs stopped part-way first), one-thread runs side by side on a CPU
  or a cell's seeds as one group on a GPU, in run folders outside the checkout (`--runs`, default $LNREPRO_RUNS or
  ~/lnrepro-runs), so a fresh clone on the same machine resumes them (`train --resume`); each record is written as
  its run ends. A set whose corpus is not prepared under `--root` waits, named at once with the command that
  prepares it, while the others train; the whole queue takes it up once the corpus is prepared.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from repro import calibration, calibration_v2_1
from repro.claims import CLAIMS, claim_cells, task_folder
from repro.config import resolve, run_folder
from repro.data.corpora import not_prepared_message, unprepared
from repro.launch import Job, default_threads, run_jobs
from repro.needed import claim_missing, missing_runs
from repro.pace import (MEASURED, depth, here_label, machine_paces, measured_paces, pace_of, recipe_batches,
                        recipe_updates, same_kind, scaled_paces)
from repro.progress import console
from repro.results import recipes_dir
from repro.tables.render import plain_table, wrap
from repro.verdicts import evaluate_claims


def default_runs() -> Path:
    """Where the queue's runs train: outside any checkout, so that a fresh clone on this machine resumes them."""
    return Path(os.environ.get("LNREPRO_RUNS") or Path.home() / "lnrepro-runs")


@dataclass
class DecisiveSet:
    kind: str                 # "calibration" or "claim"
    task: str                 # calibration's name of the task: mt, gigaword, wikitext103, librispeech
    claims: list[str]
    runs: list[tuple[str, int]]  # (recipe name, seed); a calibration run's seed is its setting's label
    state: str = "queued"     # queued / waiting
    why: str = ""
    hours: float | None = None
    priced_on: str = ""
    new_runs: list = field(default_factory=list)  # the runs no set before it queued
    done: dict = field(default_factory=dict)  # (recipe, seed) -> updates a run stopped part-way has done
    max_updates: int | None = None  # a calibration run's length where it is not the cap: the deepest Pre-LN's

    def as_dict(self) -> dict:
        return {"kind": self.kind, "task": self.task, "claims": self.claims,
                "runs": [list(r) for r in self.runs], "new_runs": [list(r) for r in self.new_runs],
                "state": self.state, "hours": self.hours, "priced_on": self.priced_on, "why": self.why,
                "max_updates": self.max_updates, "done": [[*r, n] for r, n in self.done.items()]}


def undecided_tasks(results_dir: Path) -> dict[str, dict]:
    """The calibration decision of every task whose regime is not decided yet (calibration v2.1), by task."""
    out = {}
    for task in calibration.TASKS:
        spec = calibration.load_spec(recipes_dir() / "calibration" / "v2" / f"{task}.yaml")
        d = calibration_v2_1.decision(spec, Path(results_dir) / spec.scale / "calibration" / "v2" / task, results_dir)
        if not (d.get("choice") or d.get("not_informative")):
            out[task] = {"spec": spec, "decision": d}
    return out


def calibration_sets(undecided: dict[str, dict], results_dir: Path) -> list[DecisiveSet]:
    """One set per calibration setting still to train (both baselines' runs), and the deepest Pre-LN run a
    decision waits for."""
    out = []
    for task, got in undecided.items():
        spec, d = got["spec"], got["decision"]
        out_dir = Path(results_dir) / spec.scale / "calibration" / "v2" / task
        for st in calibration_v2_1.settings_to_train(spec, d):
            runs = [(b, calibration.label(b, st)) for b in spec.baselines
                    if not (out_dir / f"{calibration.label(b, st)}.json").is_file()]
            if runs:
                out.append(DecisiveSet("calibration", task, [f"{task} regime (calibration v2.1)"], runs,
                                       why=f"setting {calibration.label('', st).lstrip('-')}; "
                                           f"{calibration_v2_1.outcome(spec, d)}"))
        if d.get("deep_needed"):
            need = d["deep_needed"]
            st = (need["warmup_updates"], need["lr"], need["tokens_factor"])
            out.append(DecisiveSet("calibration", task, [f"{task} regime (calibration v2.1)"],
                                   [(spec.deep_pre_ln, calibration.label(spec.deep_pre_ln, st))],
                                   why=f"the deepest Pre-LN at the candidate {calibration.label('', st)}, to its "
                                       f"length, {need['max_updates']:,} updates",
                                   max_updates=need["max_updates"]))
    return out


def claim_sets(results_dir: Path, scale: str, undecided: dict) -> list[DecisiveSet]:
    """One set per claim that still needs runs: those its own verdict asks for."""
    rows = {r["claim"]: r for r in evaluate_claims(results_dir, scale)}
    missing = {r["recipe"]: r for r in missing_runs(results_dir, scale)}
    out = []
    for claim in CLAIMS:
        row, cells = rows[claim.text], claim_cells(claim)
        needs = claim_missing(row, cells, missing)
        if not needs:
            continue
        runs = [(name, seed) for name, r in needs.items() for seed in r["seeds"]]
        task = task_folder(claim.a)
        s = DecisiveSet("claim", task, [claim.text], runs, why=f"{row['verdict']} ({claim.source})")
        if task in undecided:
            s.state, s.why = "waiting", f"waits for the {task} regime (calibration); {s.why}"
        out.append(s)
    return out


def run_seconds(recipe: str, scale: str, label: str, paces: dict, calibration_run: str = "",
                max_updates: int | None = None, done: int = 0) -> float | None:
    """One run's training seconds at a machine's recorded pace (of the recipe, else of its depth) for the updates
    it has left after `done`; a calibration run is priced at `max_updates`, else its spec's cap."""
    pace = pace_of(paces.get(label, {}), recipe)
    if pace is None:
        return None
    if calibration_run:
        spec = calibration.load_spec(recipes_dir() / "calibration" / "v2" / f"{task_folder(recipe)}.yaml")
        k = int(calibration_run.rsplit("-x", 1)[1]) if "-x" in calibration_run else 1
        return max(0, (max_updates or spec.max_updates) - done) * k * pace[0] / pace[1]
    return max(0, recipe_updates(recipe, scale) - done) * recipe_batches(recipe, scale) * pace[0] / pace[1]


def part_done(sets: list[DecisiveSet], runs_dir: Path, scale: str) -> None:
    """Each claim run stopped part-way in `runs_dir` (where `--run` trains it): the update of its newest
    checkpoint, into its set's `done` and `why`, which also says when a process trains it now."""
    from repro.train.checkpoint import resumable, step_of
    from repro.train.lock import lock_holder
    for s in sets:
        if s.kind != "claim":
            continue
        said = []
        for name, seed in s.runs:
            folder = run_folder(runs_dir, name, scale, seed)
            got, pid = resumable(folder), lock_holder(folder) if folder.is_dir() else None
            if got:
                s.done[name, seed] = step_of(got[-1])
                said.append(f"{name} seed {seed} at update {s.done[name, seed]:,} of "
                            f"{recipe_updates(name, scale):,} ({'training now, ' if pid else ''}its newest checkpoint)")
            elif pid:
                said.append(f"{name} seed {seed} training now (no checkpoint yet)")
        if said:
            s.why += "; " + ", ".join(said)


def pricing_label(paces: dict, machines: dict, on_gpu: bool) -> tuple[str | None, list[str]]:
    """The machine whose pace prices the queue: this one where the records keep its pace or a benchmark measured
    its step (a CPU's), else the labels of the kind here (GPU or CPU), fastest first as each set finds them."""
    here = here_label(1)
    # a run elsewhere is priced at a pace of its kind: a GPU's, or a CPU's at the queue's one thread a run
    kind = [label for label in paces if ("thread" not in label) == on_gpu
            and (on_gpu or same_kind(label) == same_kind(here))]
    return (here if here in paces or (not on_gpu and MEASURED + here in paces) else None), kind


def price(sets: list[DecisiveSet], scale: str, paces: dict, here: str | None, kinds: list[str]) -> None:
    """Each set's hours for its runs not queued by an earlier set, at one machine's pace: here, else the fastest of
    the kind that prices all of them."""
    for s in sets:
        options = [here] if here else kinds
        best = None
        for label in options:
            each = [run_seconds(r, scale, label, paces, seed if s.kind == "calibration" else "", s.max_updates,
                                s.done.get((r, seed), 0)) for r, seed in s.new_runs]
            if each and None not in each and (best is None or sum(each) < best[0]):
                best = (sum(each), label)
        s.hours, s.priced_on = (best[0] / 3600, best[1]) if best else (None, "")


def order(sets: list[DecisiveSet], scale: str, paces: dict, here: str | None, kinds: list[str]) -> list[DecisiveSet]:
    """Calibration first, then greedily the set that decides most claims per hour of its runs not yet queued;
    unpriced sets after, fewest runs first; waiting sets last."""
    queued, out = set(), []
    first = [s for s in sets if s.kind == "calibration"]
    rest = [s for s in sets if s.kind == "claim" and s.state == "queued"]
    for s in first:
        s.new_runs = [r for r in s.runs if r not in queued]
        queued.update(s.runs)
    price(first, scale, paces, here, kinds)
    out += first
    while rest:
        for s in rest:
            s.new_runs = [r for r in s.runs if r not in queued]
        price(rest, scale, paces, here, kinds)
        free = [s for s in rest if not s.new_runs]
        pick = free[0] if free else min(rest, key=lambda s: (s.hours is None, -len(s.claims) / s.hours if s.hours
                                                            else len(s.new_runs)))
        rest.remove(pick)
        queued.update(pick.runs)
        out.append(pick)
    waiting = [s for s in sets if s.state == "waiting"]
    for s in waiting:
        s.new_runs = [r for r in s.runs if r not in queued]
    price(waiting, scale, paces, here, kinds)
    return out + waiting


def build(results_dir: Path, scale: str = "mini", on_gpu: bool = False, measured: dict | None = None,
          runs_dir: Path | None = None) -> list[DecisiveSet]:
    """The decisive sets in queue order, priced from the records' paces and, for depths no record prices,
    `measured` ones (pace.measured_paces: the committed benchmarks' when not given); a run stopped part-way in
    `runs_dir` is priced for what it has left."""
    results_dir = Path(results_dir)
    undecided = undecided_tasks(results_dir) if scale == "mini" else {}
    paces, machines = machine_paces(results_dir, scale)
    if scale == "mini":  # the benchmark measures mini's step
        paces.update(measured_paces() if measured is None else measured)
    here, kinds = pricing_label(paces, machines, on_gpu)
    if here and not scaled_paces(paces, here)[0]:  # a measured step, nothing to scale it to wall time by
        here = None
    # each machine priced as this one would be (pace.scaled_paces): its records, then its measured step, then the
    # other machines of its kind; elsewhere on a CPU, every machine of the kind here, the fastest then pricing a set
    priced = [here] if here else [] if on_gpu else list(dict.fromkeys(k.removeprefix(MEASURED) for k in kinds))
    scaled = {label: got for label in priced if (got := scaled_paces(paces, label))[0]}
    paces.update({label: got[0] for label, got in scaled.items()})
    borrowed = {label: got[1] for label, got in scaled.items()}
    if not here and not on_gpu:
        kinds = list(scaled)
    sets = calibration_sets(undecided, results_dir) + claim_sets(results_dir, scale, undecided)
    if runs_dir is not None:
        part_done(sets, Path(runs_dir), scale)
    got = order(sets, scale, paces, here, kinds)
    for s in got:  # say where a price rests on another machine's pace or a measured step
        took = borrowed.get(s.priced_on, {})
        froms = sorted({took[depth(r)] for r, _ in s.new_runs if depth(r) in took})
        if here:
            froms = [f.replace(MEASURED + here, "mini_step.py here") for f in froms]
        if froms:
            s.priced_on += f" (from {'; '.join(froms)})"
    return got


def within(sets: list[DecisiveSet], hours: float | None) -> list[DecisiveSet]:
    """The queued sets that fit `hours` of priced compute, in order (an unpriced set ends the budget's list)."""
    if hours is None:
        return [s for s in sets if s.state == "queued"]
    out, total = [], 0.0
    for s in sets:
        if s.state != "queued" or s.hours is None or total + s.hours > hours:
            break
        total += s.hours
        out.append(s)
    return out


def render(sets: list[DecisiveSet], hours: float | None, fmt: str = "text", limit: int | None = None) -> str:
    import json
    chosen = within(sets, hours)[:limit]
    if fmt == "json":
        return json.dumps({"hours": hours, "sets": [s.as_dict() for s in sets],
                           "chosen": [sets.index(s) + 1 for s in chosen]}, indent=2) + "\n"
    if fmt != "text":
        raise ValueError(f"--format {fmt!r}: expected text or json")
    total, body = 0.0, []
    for i, s in enumerate(sets, 1):
        if s.hours is not None and s.state == "queued":
            total += s.hours
        cost = "not priced" if s.hours is None else f"{s.hours:.1f} h"
        where = f" (priced on {s.priced_on})" if s.hours is not None else ""
        body.append([str(i), s.state + ("*" if s in chosen and (hours is not None or limit) else ""), s.kind,
                     str(len(s.new_runs)), cost, f"{' / '.join(s.claims)}: {s.why}{where}"])
    head = (f"{len(sets)} decisive sets, {sum(len(s.new_runs) for s in sets if s.state == 'queued')} runs queued, "
            f"{sum(len(s.new_runs) for s in sets if s.state == 'waiting')} waiting for a regime")
    if hours is not None or limit:
        head += (f"; {'within ' + format(hours, 'g') + ' h' if hours is not None else f'the first {limit}'}: sets {', '.join(str(sets.index(s) + 1) for s in chosen) or 'none'} "
                 f"(marked *)")
    return wrap(head) + "\n\n" + plain_table(["#", "state", "kind", "runs", "cost",
                                                                     "claims: why"], body)


def jobs(sets: list[DecisiveSet], results_dir: Path, runs_dir: Path, data_root: Path, on_gpu: bool,
         scale: str = "mini", taken: frozenset = frozenset()) -> list:
    """The queued sets' runs as launch jobs, in queue order: a claim run's train and evaluate
    (repro/reproduce.py: lanes, grouping a cell's seeds on a GPU), a calibration setting's runs as
    `lnrepro calibrate` trains them. Runs in `taken` (the `covers` of jobs already started) are left out."""
    from repro.reproduce import PlannedRun, lane_name, lane_steps, lanes, run_state
    out, seen = [], set(taken)
    for s in sets:
        if s.state != "queued":
            continue
        if s.kind == "calibration":
            spec = calibration.load_spec(recipes_dir() / "calibration" / "v2" / f"{s.task}.yaml")
            for name, base in s.new_runs:
                if (name, base) in seen:
                    continue
                st = calibration.parse_setting(spec, "w" + base.rsplit("-w", 1)[1])
                out.append(calibration.train_job(spec, name, st, runs_dir / "calibration" / "v2" / s.task, data_root,
                                                 s.max_updates, evaluate=calibration_v2_1.x1_first(spec)))
                out[-1].covers = ((name, base),)
            continue
        planned = []
        for name, seed in s.new_runs:
            if (name, seed) in seen:
                continue
            seen.add((name, seed))
            run = PlannedRun(name, scale, seed, run_folder(runs_dir, name, scale, seed))
            run.state, run.detail = run_state(run, results_dir)
            planned.append(run)
        for lane in lanes(planned, "auto", on_gpu):
            out.append(Job(lane_name(lane), lane_steps(lane, results_dir, data_root), lane[0].run_dir / "queue.out",
                           lane[0].run_dir, recipe_updates(lane[0].recipe_name, scale),
                           tuple((r.recipe_name, r.seed) for r in lane)))
    # runs stopped part-way first: their hours are partly paid, and a fresh machine may not keep them long
    from repro.train.checkpoint import resumable
    return sorted(out, key=lambda job: not (job.run_dir and job.run_dir.is_dir() and resumable(job.run_dir)))


def watch(sets: list[DecisiveSet], results_dir: Path, runs_dir: Path):
    """(on_finish, on_tick) for run_jobs: calibration records collected as their runs end, and a setting's runs
    asked to stop once the rule has settled it (as `lnrepro calibrate` does). `sets` is read at each call, so a
    list the caller rebuilds in place is watched as it stands."""
    specs = {}

    def where(t):
        if t not in specs:
            specs[t] = calibration.load_spec(recipes_dir() / "calibration" / "v2" / f"{t}.yaml")
        out = Path(results_dir) / specs[t].scale / "calibration" / "v2" / t
        return specs[t], runs_dir / "calibration" / "v2" / t, out

    tasks = lambda: sorted({s.task for s in sets if s.kind == "calibration" and s.state == "queued"} | specs.keys())

    def collect(*_):
        for t in tasks():
            spec, runs, out = where(t)
            calibration.collect_runs(calibration.entries(spec), runs, out)

    def settle():
        for t in tasks():
            calibration.stop_settled(*where(t))
    return collect, settle


def ready(sets: list[DecisiveSet], data_root: Path, scale: str) -> tuple[list[DecisiveSet], tuple | None]:
    """The sets whose runs' corpora are all prepared under `data_root`, in order, and (how many sets wait, the
    corpora they wait for) or None where none waits: a fresh machine trains what it can while a corpus is prepared."""
    need = [{resolve(recipes_dir() / f"{name}.yaml", scale).recipe.data.corpus for name, _ in s.new_runs} for s in sets]
    missing = set(unprepared(set().union(*need), data_root))
    out = [s for s, n in zip(sets, need) if not n & missing]
    return out, ((len(sets) - len(out), sorted(missing)) if missing else None)


def run(sets: list[DecisiveSet], hours: float | None, limit: int | None, at_once: int | None, runs_dir: Path,
        data_root: Path, results_dir: Path, on_gpu: bool, scale: str = "mini",
        rebuild: Callable[[], list[DecisiveSet]] | None = None) -> None:
    """`lnrepro queue --run`: train the queued sets that fit `hours` (the first `limit`), in order, `at_once` at
    once (default one per core on a CPU, one on a GPU), collecting each record as its run ends. A job that does not
    finish is a ValueError naming it. With `rebuild` (the whole queue: no hours, no limit), the queue is rebuilt
    from the records as each job ends and the next job taken from it, so a claim's next look joins in its place;
    without, the sets are those built before it starts."""
    chosen, waits = ready(within(sets, hours)[:limit], data_root, scale)
    parallel = at_once or (1 if on_gpu else os.cpu_count() or 1)
    todo = jobs(chosen, results_dir, runs_dir, data_root, on_gpu, scale)
    if not todo:
        if waits:  # nothing here can start: the corpora are the whole answer
            raise ValueError(not_prepared_message(waits[1], data_root))
        console.print("nothing queued to train", markup=False)
        return
    said = None  # the corpora wait last said: a rebuild after each run says it again only when it changed
    waiting = lambda w: (f"{w[0]} decisive set(s) wait: {not_prepared_message(w[1], data_root)}; "
                         + ("the queue takes them up once prepared" if rebuild else
                            "the same command takes them once prepared"))

    def tell(w):
        nonlocal said
        if w and w != said:
            console.print(waiting(w), markup=False, highlight=False)
        said = w
    tell(waits)
    collect, settle = watch(chosen, results_dir, runs_dir)

    def refill(started):  # the jobs started (running or ended) are left out: an ended one that failed is not retried
        try:
            sets = within(rebuild(), None)
        except (ValueError, OSError) as e:  # a record the lanes cannot read must not stop them
            console.print(f"the queue was not rebuilt ({e}); the lanes go on with the list they had", markup=False,
                          highlight=False)
            return None
        sets, w = ready(sets, data_root, scale)
        tell(w)
        chosen[:] = sets
        return jobs(chosen, results_dir, runs_dir, data_root, on_gpu, scale,
                    frozenset(c for j in started for c in j.covers))
    console.print(f"training {len(todo)} job(s), {min(parallel, len(todo))} at once, in {runs_dir}"
                  + ("; the queue is rebuilt from the records as each ends" if rebuild else ""), markup=False,
                  highlight=False)
    done = run_jobs(todo, parallel, default_threads(parallel, len(todo)), on_finish=collect, on_tick=settle,
                    tick_s=30.0, refill=refill if rebuild else None)
    collect()
    bad = [j.name for j in done if j.state != "done"]
    if bad:
        raise ValueError(f"jobs that did not finish: {', '.join(bad)} (their logs are in their run folders under "
                         f"{runs_dir})")
    if rebuild:
        console.print(f"trained {len(done)} job(s); the queue rebuilt from their records has nothing left to train"
                      + (f" here; {waiting(said)}" if said else ""), markup=False, highlight=False)
    else:  # the list was built once, at the start: the records written since may ask for more (a claim's next look)
        console.print(f"trained the {len(todo)} job(s) queued at the start; the same command again queues what the "
                      f"records written since still need", markup=False, highlight=False)
