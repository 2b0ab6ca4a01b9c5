"""`lnrepro reproduce`: a whole table at tiny scale, skip when done, resume after an interrupt, submitit's path."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repro.cli import app
from repro.config import resolve
from repro.results import load_records

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def metrics_by_run(results: Path) -> dict:
    return {(r["recipe_name"], r["seed"]): (r["status"], r["metrics"].get("bleu_average"))
            for r in load_records(results, "tiny") if not r.get("overrides")}


@pytest.mark.slow
def test_table1_tiny_two_seeds_then_nothing_to_do(tiny_root, tmp_path):
    common = ["--scale", "tiny", "--root", str(tiny_root), "--results", str(tmp_path / "results"),
              "--runs", str(tmp_path / "runs")]
    r = runner.invoke(app, ["reproduce", "1", "--seeds", "2", "--plan", *common])
    assert r.exit_code == 0 and "18 runs: 0 done, 0 partial, 18 missing" in r.output, r.output
    # the depths the figures below read (60L-12L's 6 runs would add a third of the time and no other path)
    cells = ["--cells", "6L-6L", "--cells", "18L-18L"]
    r = runner.invoke(app, ["reproduce", "1", "--seeds", "2", *cells, "--jobs", "2", "--threads", "1", *common])
    assert r.exit_code == 0, r.output
    got = metrics_by_run(tmp_path / "results")
    assert len(got) == 12 and all(status == "completed" and bleu is not None for status, bleu in got.values())
    assert {seed for _, seed in got} == {1, 2}
    assert "B2T connection" in r.output  # the table is rendered at the end
    r = runner.invoke(app, ["reproduce", "1", "--seeds", "2", *cells, *common])
    assert r.exit_code == 0 and "nothing to do: all 12 runs" in r.output, r.output
    r = runner.invoke(app, ["reproduce", "1", "--seeds", "2", "--plan", *common])
    assert r.exit_code == 0 and "18 runs: 12 done, 0 partial, 6 missing" in r.output, r.output
    # as in a fresh clone: no runs/, only the committed records and the logs beside them
    shutil.rmtree(tmp_path / "runs")
    for number in (1, 5, 6):
        out = tmp_path / f"figure{number}.png"
        r = runner.invoke(app, ["figure", str(number), "--scale", "tiny", "--results", str(tmp_path / "results"),
                                "--out", str(out), "--json", str(tmp_path / f"figure{number}.json")])
        assert r.exit_code == 0 and out.read_bytes()[:4] == b"\x89PNG", (number, r.output)
    curves = json.loads((tmp_path / "figure1.json").read_text())
    assert set(curves) == {"post_ln", "pre_ln", "b2t"} and all(len(c) == 4 for c in curves.values())
    # interrupted, then run again: the same records as the uninterrupted runs
    again = tmp_path / "again"
    cmd = [sys.executable, "-m", "repro.cli", "reproduce", "1", "--scale", "tiny", "--cells", "6L-6L", "--seeds", "1",
           "--jobs", "2", "--threads", "1", "--root", str(tiny_root), "--results", str(again / "results"),
           "--runs", str(again / "runs")]
    # Ctrl-C reaches a foreground command; a test run started in the background inherits SIGINT ignored.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while not list((again / "runs").glob("*/log.jsonl")) and time.time() < deadline:  # a run is training
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the jobs stop, their checkpoints stay
    proc.wait(timeout=60)
    assert len(metrics_by_run(again / "results")) < 3
    r = runner.invoke(app, ["reproduce", "1", "--cells", "6L-6L", "--seeds", "1", "--jobs", "2", "--threads", "1",
                            "--scale", "tiny", "--root", str(tiny_root), "--results", str(again / "results"),
                            "--runs", str(again / "runs")])
    assert r.exit_code == 0, r.output
    resumed = metrics_by_run(again / "results")
    assert resumed == {k: v for k, v in got.items() if k[0].startswith("6L-6L") and k[1] == 1}


@pytest.mark.slow
def test_a_run_training_in_another_process_is_shown_and_left_to_it(tiny_root, tmp_path):
    """Two commands over one table: the second sees the first's run training (its lock held), shows how far it is,
    does not start it again, and starts the rest."""
    from repro.reproduce import plan
    from repro.train.lock import lock_holder
    run_dir = tmp_path / "runs/6L-6L-b2t-tiny-s1"
    run_dir.mkdir(parents=True)
    updates = resolve(REPO / "recipes/6L-6L-b2t.yaml", "tiny").recipe.optim.max_updates
    half = updates // 2
    rows = [{"step": 1, "loss": 5.0, "time": 3.0}, {"step": half, "valid_nll": 4.5},  # two seconds an update
            {"step": half, "loss": 4.0, "time": 3.0 + 2 * (half - 1)}]
    (run_dir / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 9')
    code = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path; "
            f"from repro.train.lock import run_lock\nwith run_lock(Path({str(run_dir)!r})):\n"
            f"    print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    common = ["--scale", "tiny", "--root", str(tiny_root), "--results", str(tmp_path / "results"),
              "--runs", str(tmp_path / "runs")]
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert lock_holder(run_dir) == str(holder.pid)
        [run] = plan(1, "tiny", 1, ["6L-6L:b2t"], tmp_path / "results", tmp_path / "runs")
        assert (run.state, run.detail) == (
            "running", f"training in process {holder.pid}, at update {half} ({half / updates:.0%} done)")
        assert (run.estimate_s, run.estimate_from) == (2 * (updates - half), "its own pace")
        # no record tells this depth's cost: its other methods are costed at the pace of the run training now
        others = plan(1, "tiny", 1, ["6L-6L"], tmp_path / "results", tmp_path / "runs")
        assert {(r.recipe_name, r.estimate_s, r.estimate_from) for r in others if r.state == "missing"} == {
            (f"6L-6L-{m}", 2 * updates, "its depth, training now") for m in ("post_ln", "pre_ln")}
        r = runner.invoke(app, ["reproduce", "1", "--cells", "6L-6L", "--seeds", "1", "--plan", *common])
        assert "3 runs: 0 done, 1 running, 0 partial, 2 missing" in r.output, r.output
        r = runner.invoke(app, ["reproduce", "1", "--cells", "6L-6L", "--seeds", "1", "--jobs", "2", "--threads", "1",
                                *common])
        assert r.exit_code == 0, r.output
        assert "1 run trains in another process and is left to it: 6L-6L-b2t-tiny-s1" in r.output
        assert set(metrics_by_run(tmp_path / "results")) == {("6L-6L-post_ln", 1), ("6L-6L-pre_ln", 1)}
        assert not (run_dir / "reproduce.out").exists()  # nothing was started in it
    finally:
        holder.kill()
        holder.wait()
    assert lock_holder(run_dir) is None  # its holder died: with no checkpoint the run is missing again
    [run] = plan(1, "tiny", 1, ["6L-6L:b2t"], tmp_path / "results", tmp_path / "runs")
    assert run.state == "missing"
    # with a checkpoint it is interrupted, and nothing but its own log tells its pace: what is left of it at that pace
    (tmp_path / "results").rename(tmp_path / "results-other")
    (run_dir / "checkpoint_2.pt").write_bytes(b"")
    [run] = plan(1, "tiny", 1, ["6L-6L:b2t"], tmp_path / "results", tmp_path / "runs")
    assert (run.state, run.estimate_s, run.estimate_from) == ("partial", 2 * (updates - 2), "its log so far")


def test_launch_threads_share_the_cores_with_runs_training_elsewhere(monkeypatch):
    from repro.reproduce import PlannedRun, launch_threads
    monkeypatch.setattr("repro.launch.os.cpu_count", lambda: 8)
    runs = [PlannedRun("6L-6L-b2t", "mini", seed, Path("runs"), state=state)
            for seed, state in enumerate(("running", "missing", "partial", "done"), 1)]
    assert [launch_threads(runs, jobs) for jobs in (1, 2, 4)] == [4, 2, 2]  # 8 cores over 1 running + 1, 2, 2 here
    assert launch_threads(runs[3:], 2) == 8


@pytest.mark.slow
def test_submitit_local_executor_runs_the_same_jobs(tiny_root, tmp_path):
    # A real process, as a user runs it: submitit's executor works on the process's own standard streams.
    r = subprocess.run([sys.executable, "-m", "repro.cli", "reproduce", "9", "--cells", "6L-6L:b2t",
                        "--launcher", "submitit-local", "--scale", "tiny", "--root", str(tiny_root),
                        "--results", str(tmp_path / "results"), "--runs", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "submitted 1 jobs" in r.stderr
    (rec,) = load_records(tmp_path / "results", "tiny")
    assert rec["recipe_name"] == "6L-6L-b2t" and rec["status"] == "completed" and "bleu_average" in rec["metrics"]
    assert list((tmp_path / "runs/slurm").glob("*_log.out"))


def test_bad_arguments_one_line(tmp_path):
    for args, needle in ((["reproduce", "7"], "tables 1-6, 9, 10 and 11"),
                         (["reproduce", "1", "--cells", "7L-7L"], "no such cell"),
                         (["reproduce", "1", "--launcher", "pbs"], "--launcher"),
                         (["reproduce", "1", "--seeds", "0"], "--seeds")):
        r = runner.invoke(app, [*args, "--results", str(tmp_path)])
        assert r.exit_code == 2 and needle in r.output, (args, r.output)
    cfg = tmp_path / "slurm.yaml"
    cfg.write_text("partition: gpu\nnodez: 2\n")
    r = runner.invoke(app, ["reproduce", "1", "--scale", "tiny", "--launcher", "slurm", "--slurm-config", str(cfg),
                            "--results", str(tmp_path / "r"), "--runs", str(tmp_path / "runs"),
                            "--root", str(tmp_path / "d")])
    assert r.exit_code == 2 and "nodez" in r.output, r.output
    cfg.write_text("partition: gpu\ngpus: two\n")
    r = runner.invoke(app, ["reproduce", "1", "--scale", "tiny", "--launcher", "slurm", "--slurm-config", str(cfg),
                            "--results", str(tmp_path / "r"), "--runs", str(tmp_path / "runs"),
                            "--root", str(tmp_path / "d")])
    assert r.exit_code == 2 and f"{cfg}: gpus 'two': expected a whole number" in r.output, r.output
    r = runner.invoke(app, ["reproduce", "1", "--scale", "tiny", "--launcher", "slurm", "--slurm-config", str(cfg),
                            "--gpus", "2", "--time", "0", "--results", str(tmp_path / "r"),
                            "--runs", str(tmp_path / "runs"), "--root", str(tmp_path / "d")])
    assert r.exit_code == 2 and "--time 0: expected a whole number of at least 1" in r.output, r.output
    r = runner.invoke(app, ["reproduce", "1", "--scale", "tiny", "--cells", "6L-6L,18L-18L", "--results",
                            str(tmp_path / "r"), "--runs", str(tmp_path / "runs"), "--root", str(tmp_path / "d")])
    assert r.exit_code == 2 and "--cells '6L-6L,18L-18L': table 1 has no such cell" in r.output, r.output
    assert not (tmp_path / "d").exists()  # a wrong argument makes no tiny corpus


def test_a_corpus_not_prepared_is_named_before_any_run_starts(tmp_path):
    (tmp_path / "d").mkdir()
    r = runner.invoke(app, ["reproduce", "1", "--scale", "mini", "--cells", "6L-6L", "--seeds", "1", "--results",
                            str(tmp_path / "r"), "--runs", str(tmp_path / "runs"), "--root", str(tmp_path / "d")])
    assert r.exit_code == 2, r.output
    assert (f"--root {tmp_path / 'd'}: not prepared there: multi30k (`lnrepro prepare multi30k --source "
            f"../shared/data/multi30k --root {tmp_path / 'd'}`)") in " ".join(r.output.split())
    assert not list((tmp_path / "runs").glob("*"))  # no run folder, no log


def test_plan_for_slurm_reads_runs_on_that_many_gpus_never_this_machine(tmp_path):
    """SLURM jobs train on the cluster's machines: this machine's pace says nothing of their cost."""
    from repro.reproduce import plan
    from repro.results import write_record
    from repro.provenance import hardware
    from test_tables import record
    here = hardware()
    gpu = {"device": "NVIDIA H100 80GB HBM3", "cpu": "Intel(R) Xeon(R) Processor (AVX512)", "cpu_count": 16,
           "gpus": 1, "threads": 1}
    write_record(tmp_path, {**record("18L-18L-b2t", 1, metrics={"bleu_average": 30.0}), "duration_s": 7200.0,
                            "updates": 8000, "hardware": here})
    write_record(tmp_path, {**record("18L-18L-pre_ln", 1, metrics={"bleu_average": 30.0}), "duration_s": 900.0,
                            "updates": 8000, "hardware": gpu})
    cell = ["18L-18L:b2t"]
    local = plan(1, "mini", 2, cell, tmp_path, tmp_path / "runs", threads=here["threads"])[1]
    assert local.estimate_s == pytest.approx(7200.0)  # this machine's own run
    one = plan(1, "mini", 2, cell, tmp_path, tmp_path / "runs", slurm_gpus=1)[1]
    assert (one.estimate_s, one.estimate_from) == (900.0, "its depth, 1-GPU runs")
    eight = plan(1, "mini", 2, cell, tmp_path, tmp_path / "runs", slurm_gpus=8)[1]
    assert eight.estimate_s is None


def test_plan_estimates_from_the_recipe_then_its_depth_on_this_machine_first(tmp_path):
    from repro.reproduce import describe_plan, plan
    from repro.results import write_record
    from repro.provenance import hardware
    from test_tables import record
    # records of before threads were kept: whole runs tell (the next test reads stretches at the planned threads)
    here = {k: v for k, v in hardware().items() if k != "threads"}
    elsewhere = {"device": "cpu (x86_64)", "cpu": "Other CPU (AVX512)", "cpu_count": 2}
    write_record(tmp_path, {**record("18L-18L-b2t", 1, metrics={"bleu_average": 30.0}), "duration_s": 7200.0,
                            "hardware": here})
    write_record(tmp_path, {**record("6L-6L-post_ln", 1, metrics={"bleu_average": 30.0}), "duration_s": 3600.0,
                            "hardware": here})
    # a faster machine's own 18L-18L Pre-LN run is not this machine's cost; Post-LN has only that machine's
    write_record(tmp_path, {**record("18L-18L-pre_ln", 2, metrics={"bleu_average": 30.0}), "duration_s": 2880.0,
                            "hardware": elsewhere})
    # a run the failure rule stopped halfway stands for a whole one at its own rate (mini MT: 8,000 updates)
    write_record(tmp_path, {**record("60L-12L-post_ln", 1, "failed", reason="diverged"), "duration_s": 4500.0,
                            "updates": 4000, "hardware": elsewhere})
    runs = {r.name: r for r in plan(1, "mini", 1, ["18L-18L", "6L-6L:post_ln", "60L-12L:b2t", "60L-12L:post_ln"],
                                    tmp_path, tmp_path / "runs")}
    done = runs["18L-18L-b2t-mini-s1"]  # the plan shows what it took, not an estimate
    assert (done.state, done.estimate_from, done.took_s) == ("done", "", 7200.0)
    pre = runs["18L-18L-pre_ln-mini-s1"]
    assert (pre.estimate_s, pre.estimate_from) == (7200.0, "its depth")  # not the 6L-6L hour, nor the other CPU's
    assert (runs["60L-12L-post_ln-mini-s1"].estimate_s, runs["60L-12L-post_ln-mini-s1"].estimate_from) == \
        (9000.0, "other machines")
    assert (runs["60L-12L-b2t-mini-s1"].estimate_s, runs["60L-12L-b2t-mini-s1"].estimate_from) == \
        (9000.0, "its depth, other machines")
    text = " ".join(describe_plan(list(runs.values())).split())  # the totals wrap at 80 columns
    assert "~120 min (its depth)" in text and "~150 min (its depth, other machines)" in text
    # 18L-18L Post-LN and Pre-LN at two hours each; 60L-12L B2T's 2.5 h are another machine's, no time here
    assert "about 4.0 h of runs where earlier runs tell; 1 run priced from other machines only, not in the total " \
           "(about 2.5 h there)" in text and "took 120 min" in text
    # An interrupted run costs what is left of it; its checkpoints count by number, not by name.
    run_dir = tmp_path / "runs/18L-18L-pre_ln-mini-s1"
    run_dir.mkdir(parents=True)
    for step in (600, 2000):
        (run_dir / f"checkpoint_{step}.pt").touch()
    [pre] = plan(1, "mini", 1, ["18L-18L:pre_ln"], tmp_path, tmp_path / "runs")
    assert (pre.state, pre.detail, pre.estimate_s) == ("partial", "resumable from checkpoint_2000.pt (25% done)",
                                                       5400.0)
    (run_dir / "status.json").write_text(json.dumps({"status": "completed"}))
    [pre] = plan(1, "mini", 1, ["18L-18L:pre_ln"], tmp_path, tmp_path / "runs")
    assert pre.estimate_s == 0.0 and "~0 min (its depth)" in describe_plan([pre])  # only evaluation is left
    shutil.rmtree(run_dir)
    summ = plan(2, "mini", 1, ["6L-6L:post_ln"], tmp_path, tmp_path / "runs")  # MT's 6L-6L is not Gigaword's
    assert summ[0].estimate_s is None and "cost unknown" in describe_plan(summ)
    # With no table run of a task, its calibration runs tell, at their own rate for the recipe's length.
    grid = tmp_path / "mini/calibration/gigaword"
    grid.mkdir(parents=True)
    (grid / "choice.json").write_text("{}")
    (grid / "gigaword-6L-6L-pre_ln-w400-lr0.001.json").write_text(json.dumps(
        {"recipe_name": "gigaword/6L-6L-pre_ln", "scale": "mini", "status": "completed", "step": 6000,
         "duration_s": 1200.0, "hardware": here}))
    length = resolve(REPO / "recipes/gigaword/6L-6L-post_ln.yaml", "mini").recipe.optim.max_updates
    summ = plan(2, "mini", 1, ["6L-6L:post_ln", "18L-18L:b2t"], tmp_path, tmp_path / "runs")
    assert (summ[0].estimate_s, summ[0].estimate_from) == (1200.0 * length / 6000, "its depth, calibration runs")
    assert summ[1].estimate_s is None  # a deeper model's cost is not guessed from the shallow grid


def test_plan_prices_an_earlier_regimes_run_and_a_tokens_x4_calibration_run_per_batch(tmp_path):
    """A record of an earlier regime of the recipe (its hash stale: 3,500 updates where the recipe now makes
    another number) stands for a run of today's length at its own pace, and a calibration run of four batches an
    update costs four batches' time an update: both are priced per batch of the recipe."""
    from repro.pace import recipe_updates
    from repro.reproduce import plan
    from repro.results import write_record
    from repro.provenance import hardware
    from test_tables import record
    here = {**hardware(), "threads": 1}
    write_record(tmp_path, {**record("gigaword/18L-18L-pre_ln", 1, metrics={"bleu_average": 1.0}),
                            "recipe_hash": "an0ld0regime", "updates": 3500, "duration_s": 7000.0,
                            "hardware": {**here, "threads": None}})
    grid = tmp_path / "mini/calibration/v2/gigaword"
    grid.mkdir(parents=True)
    (grid / "gigaword-6L-6L-pre_ln-w1000-lr0.001-x4.json").write_text(json.dumps(
        {"recipe_name": "gigaword/6L-6L-pre_ln", "scale": "mini", "status": "completed", "step": 500,
         "duration_s": 1000.0, "cpu_s": 990.0, "hardware": here, "overrides": ["optim.gpus_per_update=4"],
         "batching": {"tokens_per_gpu": 2048, "batches_per_forward": 1, "forwards_per_update": 4}}))
    deep, shallow = plan(2, "mini", 1, ["18L-18L:b2t", "6L-6L:b2t"], tmp_path, tmp_path / "runs", threads=1)
    assert deep.state == "missing" and (deep.estimate_s, deep.estimate_from) == (
        pytest.approx(2.0 * recipe_updates("gigaword/18L-18L-b2t", "mini")), "its depth")
    assert (shallow.estimate_s, shallow.estimate_from) == (
        pytest.approx(0.5 * recipe_updates("gigaword/6L-6L-b2t", "mini")), "its depth, 1 thread")


def test_jobs_run_with_their_heap_on_huge_pages(tmp_path, monkeypatch):
    """A job's process starts with glibc's hugetlb tunable beside any the user set (a user's own hugetlb setting
    stands), and glibc then backs a large allocation with huge pages where the kernel offers them."""
    from repro import launch
    assert launch.with_huge_pages({})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    assert launch.with_huge_pages({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})["GLIBC_TUNABLES"] == (
        "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
    assert launch.with_huge_pages({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) == {
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
    job = tmp_path / "job.sh"  # stands in for python: writes the tunables it was started with
    job.write_text(f"#!/bin/sh\necho \"$GLIBC_TUNABLES\" > {tmp_path / 'seen'}\n")
    job.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(job))
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    launch.run_jobs([launch.Job("j", [["train"]], tmp_path / "j.log")], 1, 1, poll_s=0.05)
    assert (tmp_path / "seen").read_text().strip() == "glibc.malloc.hugetlb=1"
    monkeypatch.undo()
    import platform
    if platform.libc_ver()[0] != "glibc" or tuple(map(int, platform.libc_ver()[1].split("."))) < (2, 35):
        pytest.skip("glibc before 2.35 has no hugetlb tunable")
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not thp.is_file() or "[never]" in thp.read_text() or not Path("/proc/self/smaps_rollup").is_file():
        pytest.skip("this kernel offers no transparent huge pages")
    probe = ("import torch\nx = torch.ones(64 * 2 ** 20 // 4)\n"
             "print(next(l.split()[1] for l in open('/proc/self/smaps_rollup') if l.startswith('AnonHugePages')))")
    huge_kb = int(subprocess.run([sys.executable, "-c", probe], env=launch.with_huge_pages(dict(os.environ)),
                                 capture_output=True, text=True, check=True).stdout)
    assert huge_kb >= 32 * 1024  # of the 64 MB tensor


@pytest.mark.slow
def test_sigterm_stops_the_jobs_and_an_ignored_sighup_stays_ignored(tmp_path):
    """`kill` (SIGTERM) of a running reproduce stops its jobs too; each runs in a session of its own, so it would
    otherwise train on, orphaned, holding its run directory's lock. Under nohup (SIGHUP ignored) a closed terminal
    stops nothing."""
    pid_file = tmp_path / "job.pid"
    job = tmp_path / "job.sh"  # stands in for a training: a process that waits
    job.write_text(f"#!/bin/sh\necho $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}\nexec sleep 120\n")
    job.chmod(0o755)
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import signal, sys\nfrom pathlib import Path\nfrom repro import launch\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup does\n"
        f"sys.executable = {str(job)!r}\n"
        f"launch.run_jobs([launch.Job('j', [['train']], Path({str(tmp_path / 'j.log')!r}))], 1, 1, poll_s=0.05)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the driver imports this checkout's repro, installed or not
    proc = subprocess.Popen([sys.executable, str(driver)], cwd=REPO, env=env, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.time() + 60
        while not pid_file.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        why = "timeout" if proc.poll() is None else proc.stderr.read().decode()
        assert pid_file.exists(), f"the job never started: {why}"
        job_pid = int(pid_file.read_text())
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert proc.poll() is None
        os.kill(job_pid, 0)  # still running
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0 and b"SIGTERM" in err, err.decode()
        try:
            os.kill(job_pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert not alive, "the job outlived the reproduce that started it"
    finally:
        proc.kill()
        if pid_file.exists():
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_plan_reads_a_cost_from_stretches_at_the_threads_each_run_gets(tmp_path, monkeypatch):
    """A run's pace differs with its CPU threads: a stretch of training at the planned threads on this machine tells
    its cost (seconds per update times the recipe's updates) before whole runs of unknown or other threads."""
    from repro.reproduce import describe_plan, plan
    from repro.results import write_record
    from repro.provenance import hardware
    from test_tables import record
    here = hardware()
    one, two = {**here, "threads": 1}, {**here, "threads": 2}
    # a whole run of before threads were kept, and one resumed run: 2,000 updates at 1 thread, 6,000 at 2, of which
    # 1,000 beside other work (its process had 0.5 of its threads' time: no 2-thread pace) and 3,000 with its cores
    # to itself (0.9); the last stretch's record is of before CPU seconds were kept
    write_record(tmp_path, {**record("18L-18L-b2t", 1, metrics={"bleu_average": 30.0}), "duration_s": 7200.0,
                            "updates": 8000, "hardware": {k: v for k, v in here.items() if k != "threads"}})
    write_record(tmp_path, {**record("18L-18L-post_ln", 1, metrics={"bleu_average": 30.0}), "duration_s": 12400.0,
                            "updates": 8000, "hardware": two,
                            "segments": [{"from_update": 0, "to_update": 2000, "duration_s": 4000.0, "hardware": one},
                                         {"from_update": 2000, "to_update": 3000, "duration_s": 2000.0,
                                          "cpu_s": 2000.0, "hardware": two},
                                         {"from_update": 3000, "to_update": 6000, "duration_s": 4200.0,
                                          "cpu_s": 7560.0, "hardware": two},
                                         {"from_update": 6000, "to_update": 8000, "duration_s": 2200.0,
                                          "hardware": two}]})
    # a run begun on a GPU machine (one host thread, 10 updates/s) and finished here at 1 thread, 2 s per update:
    # only its stretch here tells this machine's pace, and it is no whole-run timing of this machine
    gpu = {"device": "NVIDIA H200", "cpu": "Intel(R) Xeon(R) Processor (AVX512)", "cpu_count": 16, "gpus": 1,
           "threads": 1}
    write_record(tmp_path, {**record("18L-18L-pre_ln", 1, metrics={"bleu_average": 30.0}), "duration_s": 5550.0,
                            "updates": 8000, "hardware": one,
                            "segments": [{"from_update": 0, "to_update": 5500, "duration_s": 550.0, "cpu_s": 549.0,
                                          "hardware": gpu},
                                         {"from_update": 5500, "to_update": 8000, "duration_s": 5000.0,
                                          "cpu_s": 4900.0, "hardware": one}]})
    updates = resolve(REPO / "recipes/18L-18L-b2t.yaml", "mini").recipe.optim.max_updates
    cells = ["18L-18L:post_ln", "18L-18L:b2t"]
    post, b2t = plan(1, "mini", 2, cells, tmp_path, tmp_path / "runs", jobs=1, threads=2)[1::2]
    # 1.4 s per update over 3,000 updates, 1.1 over 2,000: 1.28 by update (not 1.25, the stretches' plain mean; the
    # shared stretch's 2.0 s would make it 1.4)
    assert (post.estimate_s, post.estimate_from) == (pytest.approx(1.28 * updates), "2 threads")
    assert (b2t.estimate_s, b2t.estimate_from) == (pytest.approx(1.28 * updates), "its depth, 2 threads")
    # without --threads, two cores shared by two jobs give each 1 thread: 2 s per update; one job gets both
    monkeypatch.setattr("repro.launch.os.cpu_count", lambda: 2)
    post, b2t = plan(1, "mini", 2, cells, tmp_path, tmp_path / "runs", jobs=2)[1::2]
    assert (post.estimate_s, post.estimate_from) == (2.0 * updates, "1 thread")
    assert (b2t.estimate_s, b2t.estimate_from) == (2.0 * updates, "its depth, 1 thread")  # not the GPU's 0.1 s
    post = plan(1, "mini", 2, ["18L-18L:post_ln"], tmp_path, tmp_path / "runs", jobs=2)[1]
    assert (post.estimate_s, post.estimate_from) == (pytest.approx(1.28 * updates), "2 threads")  # one run: both cores
    # no stretch at 3 threads: whole runs tell, as before
    post, b2t = plan(1, "mini", 2, cells, tmp_path, tmp_path / "runs", jobs=1, threads=3)[1::2]
    assert (post.estimate_s, post.estimate_from, b2t.estimate_s, b2t.estimate_from) == (12400.0, "", 7200.0, "")
    pre = plan(1, "mini", 1, ["18L-18L:pre_ln"], tmp_path, tmp_path / "runs", threads=3)[0]
    assert (pre.estimate_s, pre.estimate_from) == (9800.0, "its depth")  # not the half-GPU run's 5,550 s
    text = describe_plan(plan(1, "mini", 2, ["18L-18L:pre_ln"], tmp_path, tmp_path / "runs", threads=2))
    assert f"~{1.28 * updates / 60:.0f} min (its depth, 2 threads)" in text  # seed 2's
    assert "took 92 min" in text  # seed 1, done: what it took


def test_paper_scale_plan_costs_runs_at_the_measured_rates(tmp_path):
    """Where no record tells a paper-scale run's cost, the GPU rates measured in benchmarks/ do, for the recipe's
    own precision; another precision's rate is named with the options that would use it."""
    from repro.pace import measured_estimate, measured_rates
    (tmp_path / "paper_scale_h100.json").write_text(json.dumps({
        "machine": {"device": "NVIDIA H100"},
        "rows": [{"depth": "18L-18L", "precision": "fp32", "mode": "eager", "tokens_per_gpu": 3584,
                  "tokens_per_s": 10000.0},
                 {"depth": "18L-18L", "precision": "bf16", "mode": "graphs", "tokens_per_gpu": 28672,
                  "tokens_per_s": 200000.0}]}))
    (tmp_path / "cpu.json").write_text(json.dumps({"machine": {"device": "cpu"}, "rows": [
        {"depth": "6L-6L", "precision": "fp32", "mode": "eager", "tokens_per_gpu": 3584, "tokens_per_s": 1.0}]}))
    rates = measured_rates(tmp_path)
    assert len(rates) == 2  # a CPU's rows never cost a GPU run
    seconds, source = measured_estimate("18L-18L-b2t", "paper", 8, rates)
    assert seconds == pytest.approx(3584 * 128 * 50000 / (8 * 10000.0)) and "fp32" in source and "x8 GPU" in source
    none, why = measured_estimate("6L-6L-b2t", "paper", 8, rates)
    assert none is None and why == ""
    only_bf16 = [r for r in rates if r["precision"] == "bf16"]
    none, why = measured_estimate("18L-18L-b2t", "paper", 8, only_bf16)
    assert none is None and "--precision bf16 --tokens-per-gpu 28672" in why
    assert measured_estimate("18L-18L-b2t", "mini", 1, rates) == (None, "")


def test_slurm_launcher_off_a_cluster_says_so_in_one_line(tmp_path):
    r = runner.invoke(app, ["reproduce", "2", "--scale", "tiny", "--launcher", "slurm", "--runs", str(tmp_path / "r"),
                            "--results", str(tmp_path / "res"), "--root", str(tmp_path / "data")])
    assert r.exit_code == 2 and "no SLURM here" in r.output and "--launcher submitit-local" in r.output
    assert "Traceback" not in r.output


def test_plan_states_the_grids_wall_time_under_its_jobs():
    from repro.pace import wall_time
    from repro.reproduce import PlannedRun, describe_plan
    assert wall_time([3600.0] * 4, 2) == 7200.0
    assert wall_time([3600.0, 60.0, 60.0], 2) == 3600.0
    assert wall_time([100.0, 200.0], 1) == 300.0
    runs = [PlannedRun("6L-6L-b2t", "mini", s, Path(f"/tmp/r{s}")) for s in (1, 2, 3, 4)]
    for r in runs:
        r.state, r.detail, r.estimate_s, r.estimate_from = "missing", "", 3600.0, ""
    text = " ".join(describe_plan(runs, jobs=2).split())  # the totals wrap at 80 columns
    assert "about 4.0 h of runs where earlier runs tell, 2.0 h of wall time at 2 at once" in text
    assert "wall time" not in describe_plan(runs, jobs=1)


def test_a_cell_whose_recipe_file_is_missing_says_so(tmp_path, monkeypatch):
    from repro.reproduce import plan
    monkeypatch.setattr("repro.reproduce.recipes_dir", lambda: tmp_path)  # a new variant's row, its recipes not yet
    with pytest.raises(ValueError, match=r"recipes/6L-6L-rezero.yaml: no such recipe \(table 11's 6L-6L rezero cell"):
        plan(11, "tiny", 1, ["6L-6L:rezero"], tmp_path, tmp_path / "runs")
