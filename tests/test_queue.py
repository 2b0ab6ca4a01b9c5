"""`lnrepro queue`: decisive sets from the claims' own needs, calibration of an undecided task first, claims per
priced hour, runs shared between sets paid once, claims of an undecided regime waiting, a budget, and the jobs that
train them in run folders outside the checkout."""

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repro import queue
from repro.cli import app
from repro.judging import SEED_CAP
from repro.needed import missing_runs
from repro.pace import MEASURED, here_label, measured_paces, pace_of, scaled_paces, wall_per_step
from repro.queue import DecisiveSet

REPO = Path(__file__).resolve().parents[1]
RECIPE = "6L-6L-b2t"


def paces(seconds_per_batch: float) -> dict:
    return {"cpu, 1 thread": {RECIPE: [seconds_per_batch, 1], "6L-6L-pre_ln": [seconds_per_batch, 1]}}


def test_claims_per_hour_first_and_shared_runs_paid_once():
    one = DecisiveSet("claim", "mt", ["one claim"], [(RECIPE, 4), (RECIPE, 5), ("6L-6L-pre_ln", 4)])
    two = DecisiveSet("claim", "mt", ["a", "b"], [(RECIPE, 4), (RECIPE, 5), ("6L-6L-pre_ln", 4), ("6L-6L-pre_ln", 5)])
    sub = DecisiveSet("claim", "mt", ["its runs are another set's"], [(RECIPE, 4)])
    wait = DecisiveSet("claim", "wikitext103", ["lm"], [("wikitext103/6L-b2t", 4)], state="waiting")
    cal = DecisiveSet("calibration", "librispeech", ["regime"], [("librispeech/6L-6L-post_ln", "x")])
    got = queue.order([one, two, sub, wait, cal], "mini", paces(0.01), "cpu, 1 thread", [])
    assert got[0] is cal and got[-1] is wait
    assert got[1] is sub  # one claim for one run
    assert got[2] is two and len(two.new_runs) == 3  # two claims for the three runs left beat one for two
    assert got[3] is one and one.new_runs == [] and one.hours is None  # nothing left to pay for
    assert two.hours == 3 * sub.hours


def test_a_budget_takes_the_queued_sets_in_order_while_they_fit():
    sets = [DecisiveSet("claim", "mt", [str(i)], [], hours=h) for i, h in enumerate((1.0, 2.0, 3.0))]
    assert queue.within(sets, 3.5) == sets[:2] and queue.within(sets, 0.5) == [] and queue.within(sets, None) == sets
    sets[1].hours = None  # an unpriced set ends what a budget can promise
    assert queue.within(sets, 100) == sets[:1]


def test_a_depth_this_machine_never_trained_is_priced_from_a_machine_of_its_kind_scaled_by_their_ratio():
    here, a, b, c = "here, 1 thread", "a, 1 thread", "b, 2 threads", "c, 1 thread"
    paces = {here: {"wikitext103/6L-pre_ln": [100.0, 100]},
             a: {"wikitext103/6L-pre_ln": [191.0, 99], "wikitext103/6L-b2t": [9.0, 1], "18L-18L-b2t": [400.0, 100]},
             b: {"wikitext103/6L-pre_ln": [10.0, 100], "60L-12L-b2t": [1.0, 1]},  # two threads: not comparable
             c: {"wikitext103/6L-pre_ln": [50.0, 10], "18L-18L-dlcl": [1.0, 1], "gigaword/6L-6L-b2t": [30.0, 10]}}
    mine, borrowed = scaled_paces(paces, here)
    assert mine["wikitext103/6L-pre_ln"] == [100.0, 100] and "wikitext103/6L" not in borrowed  # its own pace stands
    # a's depth pace is 200 s for 100 batches against here's 100: a ratio of 0.5
    assert mine["18L-18L-b2t"] == [200.0, 100] and borrowed["18L-18L"] == "a, 1 thread x 0.50"
    assert mine["gigaword/6L-6L-b2t"] == [6.0, 10] and borrowed["gigaword/6L-6L"] == "c, 1 thread x 0.20"
    assert pace_of(mine, "gigaword/6L-6L-pre_ln") == [6.0, 10]  # a recipe no machine trained: its depth's pace
    assert pace_of(mine, "60L-12L-b2t") is None  # only a two-thread machine trained it
    # a depth's recipes come from the source of the depth: here's own, a's 18L-18L (a shares 100 batches with here,
    # c only 10); DLCL then at a's depth pace, not at c's
    assert "wikitext103/6L-b2t" not in mine and "18L-18L-dlcl" not in mine
    assert pace_of(mine, "wikitext103/6L-b2t") == [100.0, 100] and pace_of(mine, "18L-18L-dlcl") == [200.0, 100]
    assert scaled_paces(paces, "nobody, 1 thread") == ({}, {})  # nothing of its own: no ratio to scale by


def test_a_depth_no_record_prices_is_priced_from_the_cpu_time_the_benchmark_measured(tmp_path):
    row = lambda recipe, ms: {"recipe": recipe, "machine": "here, 1 thread", "steps": 10, "cpu_ms_per_step": ms,
                              "threads": 1, "round": 1}
    rows = [row("librispeech/6L-6L-pre_ln", 100.0), row("gigaword/18L-18L-pre_ln", 800.0),
            row("gigaword/18L-18L-pre_ln", 1000.0), {"recipe": "gigaword/6L-6L-b2t", "steps": 5}]  # no machine: skipped
    (tmp_path / "mini_paces_cpu_x.json").write_text(json.dumps({"rows": rows}))
    (tmp_path / "mini_paces_cpu_broken.json").write_text("{")
    (tmp_path / "mini_step_cpu_x.json").write_text(json.dumps({"rows": [row("wikitext103/16L-b2t", 1.0)]}))
    measured = measured_paces(tmp_path)
    label = "mini_step.py on here, 1 thread"
    assert measured == {label: {"librispeech/6L-6L-pre_ln": [1.0, 10], "gigaword/18L-18L-pre_ln": [18.0, 20]}}
    # the records' wall seconds per batch against the benchmark's CPU seconds on the depth both have: 0.12 / 0.10;
    # this machine's measured step before another machine's records, though these share more batches with it
    paces = {"here, 1 thread": {"librispeech/6L-6L-post_ln": [120.0, 1000]},
             "other, 1 thread": {"librispeech/6L-6L-pre_ln": [240.0, 1000], "gigaword/18L-18L-b2t": [5.0, 1],
                                 "gigaword/6L-6L-b2t": [1.0, 1]},
             **measured}
    mine, borrowed = scaled_paces(paces, "here, 1 thread")
    assert mine["gigaword/18L-18L-pre_ln"] == pytest.approx([18.0 * 1.2, 20])
    assert borrowed["gigaword/18L-18L"] == f"{label} x 1.20"
    assert "gigaword/18L-18L-b2t" not in mine and pace_of(mine, "gigaword/18L-18L-b2t") == pytest.approx([21.6, 20])
    assert mine["gigaword/6L-6L-b2t"] == [0.5, 1] and borrowed["gigaword/6L-6L"] == "other, 1 thread x 0.50"
    assert mine["librispeech/6L-6L-post_ln"] == [120.0, 1000] and "librispeech/6L-6L-pre_ln" not in mine  # recorded


def test_a_machine_with_no_record_yet_is_priced_from_its_measured_step_at_another_machines_wall_time_per_step():
    here, other, two = "new, 1 thread", "old, 1 thread", "two, 2 threads"
    paces = {other: {"6L-6L-b2t": [120.0, 1000], "18L-18L-b2t": [50.0, 100]},  # 0.12 s a batch of 6L-6L
             "mini_step.py on " + other: {"6L-6L-pre_ln": [1.0, 10]},  # its step: 0.10 s, so wall / step 1.2
             two: {"6L-6L-b2t": [1.0, 1000]}, "mini_step.py on " + two: {"6L-6L-b2t": [10.0, 10]},  # 2 threads
             "mini_step.py on " + here: {"6L-6L-b2t": [2.0, 10], "gigaword/6L-6L-b2t": [3.0, 10]}}
    mine, borrowed = scaled_paces(paces, here)
    assert mine["6L-6L-b2t"] == pytest.approx([2.4, 10]) and mine["gigaword/6L-6L-b2t"] == pytest.approx([3.6, 10])
    assert borrowed["6L-6L"] == "mini_step.py on new, 1 thread x 1.20, the wall time per step on old, 1 thread"
    # a depth it never measured: the other machine's records times the two machines' ratio (0.24 s a batch against
    # 0.12), as for a machine with records
    assert mine["18L-18L-b2t"] == pytest.approx([100.0, 100]) and borrowed["18L-18L"] == "old, 1 thread x 2.00"
    # no machine of its kind keeps both records and a measured step: nothing to scale the step to wall time by
    assert scaled_paces({k: v for k, v in paces.items() if k != "mini_step.py on " + other}, here) == ({}, {})


def test_a_measured_step_is_scaled_to_wall_time_by_its_own_machines_records_before_another_machines():
    mine, more = "mine, 1 thread", "more, 1 thread"
    paces = {mine: {"6L-6L-b2t": [12.0, 100]}, MEASURED + mine: {"6L-6L-pre_ln": [1.0, 10]},  # 0.12 s against 0.10
             more: {"6L-6L-b2t": [300.0, 1000]}, MEASURED + more: {"6L-6L-pre_ln": [4.0, 20]},  # 0.30 against 0.20
             "two, 2 threads": {"6L-6L-b2t": [9.0, 1]}, MEASURED + "two, 2 threads": {"6L-6L-b2t": [1.0, 1]}}
    assert wall_per_step(paces, mine) == (pytest.approx(1.2), mine)
    assert wall_per_step(paces, "new, 1 thread") == (pytest.approx(1.5), more)  # the most batches shared
    assert wall_per_step({mine: paces[mine], MEASURED + more: paces[MEASURED + more]}, mine) is None


def test_the_queue_prices_with_the_measured_paces_what_no_record_prices(monkeypatch, committed_results):
    # on the machine most records trained on, whatever machine runs the test: on one no record names, every depth
    # any machine priced is priced from it, and no set is left for the measured paces; the 16L LM's records left
    # out, a depth no record prices then
    from repro import provenance
    results = committed_results(*(f"wikitext103/16L-{v}" for v in ("post_ln", "pre_ln", "b2t")))
    hw = json.loads((results / "mini" / "6L-6L-b2t_noln" / "seed11.json").read_text())["hardware"]
    assert hw["cpu_id"] == "AuthenticAMD family 26 model 2"
    monkeypatch.setattr(provenance, "hardware", lambda world_size=1: hw)
    unpriced = [s for s in queue.build(results, "mini", measured={}) if s.state == "queued" and s.hours is None
                and s.kind == "claim"]
    assert unpriced and all(r.startswith("wikitext103/16L-") for s in unpriced for r, _ in s.new_runs)
    recipes = {r for s in unpriced for r, _ in s.new_runs}
    # a pace for each of them on this machine, and the recipes this machine's records price, at one second a batch
    from repro.pace import machine_paces
    known = set(machine_paces(results, "mini")[0].get(here_label(1), {}))
    measured = {"mini_step.py on " + here_label(1): {k: [1.0, 1] for k in recipes | known}}
    got = {tuple(s.claims): s for s in queue.build(results, "mini", measured=measured)}
    for s in unpriced:
        now = got[tuple(s.claims)]
        assert now.hours is not None and "(from mini_step.py here x " in now.priced_on, now.priced_on


def test_a_machine_no_record_names_prices_the_queue_at_its_measured_step(monkeypatch, committed_results):
    from repro import provenance
    results = committed_results("6L-6L-admin")  # Table 5's 6L-6L set stays queued
    hw = json.loads((results / "mini" / "6L-6L-b2t_noln" / "seed11.json").read_text())["hardware"]
    monkeypatch.setattr(provenance, "hardware", lambda world_size=1: {**hw, "cpu_id": "GenuineIntel family 6 model 250"})
    here = here_label(1)
    elsewhere = queue.build(results, "mini")  # no measured step: other machines' paces
    assert not any(s.priced_on.startswith(here) for s in elsewhere)
    # each at one thread a run, as the queue trains, and each machine as this one would be: its records, then its
    # measured step scaled to wall time (never the bare step), then its kind's other machines
    from repro.pace import MEASURED, depth, machine_paces
    recorded = machine_paces(results, "mini")[0]
    priced = [s for s in elsewhere if s.hours is not None]
    assert priced
    for s in priced:
        label = s.priced_on.split(" (from ")[0]
        assert label.endswith(", 1 thread") and not label.startswith(MEASURED), s.priced_on
        if any(depth(r) not in {depth(n) for n in recorded[label]} for r, _ in s.new_runs):
            assert " (from " in s.priced_on, s.priced_on
    measured = {**measured_paces(), "mini_step.py on " + here: {RECIPE: [0.5, 1]}}
    got = [s for s in queue.build(results, "mini", measured=measured) if s.hours is not None]
    assert got and all(s.priced_on.startswith(here) for s in got)
    mt = next(s for s in got if any(r.startswith("6L-6L-") for r, _ in s.new_runs))
    assert "(from mini_step.py here x " in mt.priced_on and "the wall time per step on " in mt.priced_on


def test_the_deepest_pre_ln_run_trains_and_is_priced_to_its_candidates_length_as_calibrate_trains_it(tmp_path):
    from repro import calibration
    from repro.results import recipes_dir
    spec = calibration.load_spec(recipes_dir() / "calibration" / "v2" / "librispeech.yaml")  # as the queue loads it
    st = (4000, 0.0005, 1)
    deep = DecisiveSet("calibration", "librispeech", ["regime"],
                       [(spec.deep_pre_ln, calibration.label(spec.deep_pre_ln, st))], max_updates=12000)
    deep.new_runs = deep.runs
    (job,) = queue.jobs([deep], REPO / "results", tmp_path / "lanes", tmp_path / "data", on_gpu=False)
    same = calibration.train_job(spec, spec.deep_pre_ln, st, tmp_path / "lanes" / "calibration" / "v2" / "librispeech",
                                 tmp_path / "data", 12000, evaluate=True)
    assert job.steps == same.steps and "optim.max_updates=12000" in job.steps[0]
    pace = {"cpu, 1 thread": {spec.deep_pre_ln: [1.0, 1]}}
    queue.price([deep], "mini", pace, "cpu, 1 thread", [])
    assert deep.hours == pytest.approx(12000 / 3600)  # not the cap's 24,000


def test_the_queue_of_the_committed_records_and_its_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("LNREPRO_RUNS", str(tmp_path / "lanes"))
    assert queue.default_runs() == tmp_path / "lanes"
    sets = queue.build(REPO / "results", "mini")
    kinds = [s.kind for s in sets]
    assert kinds == sorted(kinds)  # "calibration" sets before "claim" sets
    undecided = set(queue.undecided_tasks(REPO / "results"))  # the tasks whose grids are unfinished come first
    assert {s.task for s in sets if s.kind == "calibration"} == undecided
    claims = [s for s in sets if s.kind == "claim" and s.state == "queued"]
    priced = [s for s in claims if s.hours]
    rate = [len(s.claims) / s.hours for s in priced]
    # greedy: a set that shares no run with an earlier one was priced the same when each earlier set was picked
    for j, s in enumerate(priced):
        if len(s.new_runs) == len(s.runs):
            assert all(r >= rate[j] - 1e-12 for r in rate[:j]), (j, rate)
    assert all(s.hours is None for s in claims[len(priced):])  # unpriced sets after the priced ones
    # the runs a set asks for are the claim's own next look, never past the cap: counted with the cell's seeds of
    # today's model code, never by seed number (a seed of an older version keeps its number; repro/needed.py)
    have = {m["recipe"]: m["have"] for m in missing_runs(REPO / "results", "mini")}
    for s in sets:
        if s.kind == "claim":
            for name, asked in Counter(name for name, _ in s.runs).items():
                assert have[name] + asked <= SEED_CAP, (s.claims, name)
    jobs = queue.jobs(claims[:1], REPO / "results", tmp_path / "lanes", tmp_path / "data", on_gpu=False)
    assert jobs and all(str(j.run_dir).startswith(str(tmp_path / "lanes")) for j in jobs)
    train = jobs[0].steps[0]
    assert train[0] == "train" and "--resume" in train and jobs[0].steps[-1][0] == "evaluate"


def test_queue_cli_text_json_and_bad_input(tmp_path):
    r = CliRunner().invoke(app, ["queue", "--hours", "10"])
    assert r.exit_code == 0 and "decisive sets" in r.output and "within 10 h" in r.output
    data = json.loads(CliRunner().invoke(app, ["queue", "--format", "json"]).output)
    assert data["sets"] and {"kind", "claims", "runs", "hours", "state", "why"} <= set(data["sets"][0])
    bad = CliRunner().invoke(app, ["queue", "--format", "yaml"])
    assert bad.exit_code == 2 and "--format 'yaml'" in bad.output
    # a wrong --runs or --jobs is said before the queue is built and printed, and nothing is made
    (tmp_path / "a file").write_text("")
    bad = CliRunner().invoke(app, ["queue", "--runs", str(tmp_path / "a file" / "lanes")])
    assert bad.exit_code == 2 and "is a file, not a folder" in bad.output and "decisive sets" not in bad.output
    bad = CliRunner().invoke(app, ["queue", "--run", "--jobs", "0", "--runs", str(tmp_path / "lanes")])
    assert bad.exit_code == 2 and "--jobs 0: expected at least 1" in bad.output and "decisive sets" not in bad.output
    bad = CliRunner().invoke(app, ["queue", "--jobs", "-1", "--runs", str(tmp_path / "lanes")])  # without --run too
    assert bad.exit_code == 2 and "--jobs -1: expected at least 1" in bad.output
    assert not (tmp_path / "lanes").exists()


@pytest.mark.slow
def test_queue_run_stopped_and_started_again_gives_the_records_of_an_uninterrupted_one(tiny_root, tmp_path):
    """`queue --run` at tiny, its first set (three runs, two lanes): SIGTERM mid-run, then the same command again
    from a fresh clone on the same run folder (the lanes live outside any checkout) gives records equal to an
    uninterrupted queue's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    def cmd(tag):
        return [sys.executable, "-m", "repro.cli", "queue", "--scale", "tiny", "--run", "--limit", "1", "--jobs", "2",
                "--runs", str(tmp_path / f"lanes-{tag}"), "--results", str(tmp_path / f"res-{tag}"), "--root",
                str(tiny_root)]
    env = {**os.environ, "LNREPRO_QUIET": "1", "LNREPRO_THREADS": "1"}
    for tag in ("whole", "cut"):
        (tmp_path / f"res-{tag}").mkdir()
    whole = subprocess.run(cmd("whole"), capture_output=True, text=True, env=env, timeout=600)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    said = " ".join((whole.stdout + whole.stderr).split())
    assert "trained the 3 job(s) queued at the start; the same command again" in said
    proc = subprocess.Popen(cmd("cut"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    deadline = time.time() + 300
    logs = lambda: list((tmp_path / "lanes-cut").glob("*/log.jsonl"))
    while time.time() < deadline and not any(len(p.read_text().splitlines()) >= 2 for p in logs()):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0 and "Traceback" not in out, out
    clone = tmp_path / "clone"  # a fresh clone of this commit finds the runs where they are, outside any checkout
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    again = subprocess.run(cmd("cut"), capture_output=True, text=True, env={**env, "PYTHONPATH": str(clone)},
                           cwd=clone, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    records = lambda tag: {p.relative_to(tmp_path / f"res-{tag}").as_posix(): json.loads(p.read_text())
                           for p in (tmp_path / f"res-{tag}").rglob("seed*.json")}
    a, b = records("whole"), records("cut")
    assert a.keys() == b.keys() and len(a) == 3
    same = lambda m: {k: v for k, v in m.items() if k not in ("eval_seconds", "eval_hardware")}
    for key in a:
        assert (a[key]["status"], a[key]["updates"], same(a[key]["metrics"])) == \
            (b[key]["status"], b[key]["updates"], same(b[key]["metrics"])), key
    assert any(len(r.get("segments", [])) > 1 for r in b.values())  # one of them was resumed


@pytest.mark.slow
def test_the_gpu_machines_script_runs_the_queue_and_brings_back_what_it_made(tiny_root, tmp_path):
    """device/run.sh on this CPU at tiny, with a deadline of 40 s: the queue it worked from, its output, the results
    folder and, where a run did not finish, an archive of it (its newest checkpoint, log and recipe)."""
    import os
    import subprocess
    import tarfile
    out, res = tmp_path / "out", tmp_path / "res"
    env = {**os.environ, "OUT": str(out), "LNREPRO_SCALE": "tiny", "LNREPRO_SETS": "1", "LNREPRO_RESULTS_DIR":
           str(res), "LNREPRO_RUNS": str(tmp_path / "lanes"), "LNREPRO_DATA": str(tiny_root), "LNREPRO_QUIET": "1",
           "LNREPRO_CHECKPOINT_MINUTES": "0.05"}
    done = subprocess.run(["bash", str(REPO / "device/run.sh"), "40"], capture_output=True, text=True, env=env,
                          timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    queued = json.loads((out / "queue.json").read_text())
    assert queued["sets"] and "queue --run exit" in (out / "queue-run.out").read_text()
    assert (out / "results").is_dir()
    made = sorted(p.name for p in (out / "results").rglob("seed*.json"))
    archive = out / "unfinished-runs.tar.gz"
    if archive.exists():  # the deadline cut a run: it comes back to be resumed
        names = tarfile.open(archive).getnames()
        assert any(n.endswith("log.jsonl") for n in names) and any(n.endswith(".pt") for n in names)
    else:  # every run finished, or (on a loaded machine) one was cut before it had anything to resume from
        cut = [d for d in (tmp_path / "lanes").rglob("*") if (d / "recipe.yaml").is_file()
               and not (d / "metrics.json").is_file()]
        assert len(made) == 3 or (made and all(not list(d.glob("*.pt")) for d in cut)), (made, cut)


def test_runs_stopped_part_way_go_first(tmp_path):
    a = DecisiveSet("claim", "mt", ["a"], [(RECIPE, 4)])
    b = DecisiveSet("claim", "mt", ["b"], [("6L-6L-pre_ln", 4)])
    for s in (a, b):
        s.new_runs = list(s.runs)
    partial = tmp_path / "lanes" / "6L-6L-pre_ln-mini-s4"
    partial.mkdir(parents=True)
    (partial / "resume_50.pt").write_bytes(b"x")
    (tmp_path / "results").mkdir()  # no records: neither run is done (the committed records may hold either seed)
    jobs = queue.jobs([a, b], tmp_path / "results", tmp_path / "lanes", tmp_path / "data", on_gpu=False)
    assert [j.name for j in jobs] == ["6L-6L-pre_ln-mini-s4", "6L-6L-b2t-mini-s4"]


def test_a_run_stopped_part_way_is_priced_for_the_updates_it_has_left(tmp_path):
    whole = DecisiveSet("claim", "mt", ["a"], [(RECIPE, 4)])
    part = DecisiveSet("claim", "mt", ["b"], [("6L-6L-pre_ln", 4)])
    stopped = tmp_path / "lanes" / "6L-6L-pre_ln-mini-s4"
    stopped.mkdir(parents=True)
    (stopped / "checkpoint_2000.pt").write_bytes(b"x")
    (stopped / "resume_6000.pt").write_bytes(b"x")  # the newest of either kind
    queue.part_done([whole, part], tmp_path / "lanes", "mini")
    assert whole.done == {} and part.done == {("6L-6L-pre_ln", 4): 6000}
    assert part.why.endswith("6L-6L-pre_ln seed 4 at update 6,000 of 8,000 (its newest checkpoint)")
    got = queue.order([whole, part], "mini", paces(0.01), "cpu, 1 thread", [])
    assert got == [part, whole]  # one claim for a quarter of a run first
    assert part.hours == pytest.approx(whole.hours / 4)
    assert part.as_dict()["done"] == [["6L-6L-pre_ln", 4, 6000]]
    # a run a process trains now (its folder locked) says so, with or without a checkpoint yet
    from repro.train.lock import run_lock
    fresh = DecisiveSet("claim", "mt", ["c"], [("6L-6L-post_ln", 4)])
    part.why, fresh.why = "b", "c"
    with run_lock(stopped), run_lock(tmp_path / "lanes" / "6L-6L-post_ln-mini-s4"):
        queue.part_done([part, fresh], tmp_path / "lanes", "mini")
    assert part.why == "b; 6L-6L-pre_ln seed 4 at update 6,000 of 8,000 (training now, its newest checkpoint)"
    assert fresh.why == "c; 6L-6L-post_ln seed 4 training now (no checkpoint yet)" and fresh.done == {}


def test_a_set_whose_corpus_is_not_prepared_waits_and_with_nothing_else_queue_run_names_it_before_any_start(tmp_path):
    """A fresh machine trains what it can while a corpus is prepared: a set needing a corpus not prepared under
    --root is left out, the others keep their order; when every set waits, --run names each missing corpus with
    the command that prepares it, and starts nothing."""
    root = tmp_path / "d"
    (root / "multi30k").mkdir(parents=True)
    (root / "multi30k" / "meta.json").write_text("{}")  # prepared, as far as the launch looks
    mt = [DecisiveSet("claim", "mt", [c], [(RECIPE, 9)]) for c in ("a", "c")]
    summ = DecisiveSet("claim", "gigaword", ["b"], [("gigaword/6L-6L-b2t", 9), ("gigaword/6L-6L-pre_ln", 9)])
    mixed = DecisiveSet("claim", "mt", ["d"], [(RECIPE, 10), ("gigaword/6L-6L-b2t", 10)])
    for s in (*mt, summ, mixed):
        s.new_runs = list(s.runs)
    assert queue.ready([mt[0], summ, mt[1], mixed], root, "mini") == ([mt[0], mt[1]], (2, ["gigaword_sample"]))
    assert queue.ready(mt, root, "mini") == (mt, None)
    with pytest.raises(ValueError) as e:
        queue.run([summ, mixed], None, None, 2, tmp_path / "runs", root, tmp_path / "results", on_gpu=False)
    assert str(e.value) == (f"--root {root}: not prepared there: gigaword_sample (`lnrepro prepare gigaword "
                            f"--source ../shared/data/gigaword --root {root}`)")
    assert not list((tmp_path / "runs").glob("*"))  # nothing started


def test_run_jobs_takes_the_jobs_refill_gives_as_each_job_ends(tmp_path, monkeypatch):
    """A job ending asks `refill` for what to take next, in place of the jobs still queued; the jobs it is given
    are those started so far."""
    import sys

    from repro import launch
    ran = tmp_path / "ran"
    job = tmp_path / "job.sh"  # stands in for python: notes which job it was started for
    job.write_text(f"#!/bin/sh\necho \"$4\" >> {ran}\n")
    job.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(job))
    make = lambda name: launch.Job(name, [["train", name]], tmp_path / f"{name}.log")
    asked = []

    def refill(started):  # c and d in place of b; then None: d stays queued
        asked.append([j.name for j in started])
        return [make("c"), make("d")] if len(asked) == 1 else None
    done = launch.run_jobs([make("a"), make("b")], 1, 1, poll_s=0.05, refill=refill)
    assert ran.read_text().split() == ["a", "c", "d"]  # b was replaced before it started
    assert [(j.name, j.state) for j in done] == [("a", "done"), ("c", "done"), ("d", "done")]
    assert asked == [["a"], ["a", "c"], ["a", "c", "d"]]


@pytest.mark.slow
def test_the_whole_queue_is_rebuilt_as_each_run_ends_and_a_new_look_joins(tiny_root, tmp_path, capfd):
    """`queue --run` on the whole queue: when a run ends the queue is rebuilt from the records, so a run the new
    records ask for (a claim's next look) is trained in the same command; the runs already started are not
    started again; a rebuild that fails leaves the lanes on the list they had; a set whose corpus is not prepared
    waits, said once and again at the end."""
    first = DecisiveSet("claim", "mt", ["look 1"], [(RECIPE, 1)])
    nxt = DecisiveSet("claim", "mt", ["look 2"], [(RECIPE, 1), ("6L-6L-pre_ln", 1), ("6L-6L-post_ln", 1)])
    speech = DecisiveSet("claim", "librispeech", ["asr"], [("librispeech/6L-6L-b2t", 1)])  # tiny_speech: not here
    for s in (first, nxt, speech):
        s.new_runs = list(s.runs)
    results = tmp_path / "results"
    results.mkdir()
    builds = []

    def rebuild():  # stands in for queue.build: after the first run's record, the claim's next look asks for more
        builds.append(sorted(p.parent.name for p in results.rglob("seed*.json")))
        if len(builds) == 2:
            raise ValueError("results/x.json: line 1 is not JSON")
        return [nxt, speech] if len(builds) == 1 else [speech]
    queue.run([speech, first], None, None, 1, tmp_path / "lanes", tiny_root, results, on_gpu=False, scale="tiny",
              rebuild=rebuild)
    assert builds == [[RECIPE], [RECIPE, "6L-6L-pre_ln"], [RECIPE, "6L-6L-post_ln", "6L-6L-pre_ln"]]
    said = " ".join(capfd.readouterr().err.split())
    assert "the queue was not rebuilt (results/x.json: line 1 is not JSON); the lanes go on" in said
    waits = f"1 decisive set(s) wait: --root {tiny_root}: not prepared there: tiny_speech (`lnrepro prepare tiny"
    assert said.count(waits) == 2, said  # at the start (not again at each rebuild), and in the last line
    assert said.endswith("has nothing left to train here; " + waits + " --source ../shared/data/librispeech "
                         f"--root {tiny_root}`); the queue takes them up once prepared"), said
    assert not (tmp_path / "lanes" / "librispeech").exists() and not list((tmp_path / "lanes").glob("*speech*"))
    for name in (RECIPE, "6L-6L-pre_ln", "6L-6L-post_ln"):
        record = json.loads((results / "tiny" / name / "seed1.json").read_text())
        assert record["status"] == "completed", name
