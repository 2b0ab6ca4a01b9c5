"""Tiny prepare -> train -> evaluate -> table runs end to end; resume is exact; torchrun equals update_freq."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from repro.cli import app
from repro.config import resolve
from repro.data.text import read_meta
from repro.data.text import corpus_fingerprint
from repro.results import load_records
from repro.provenance import cpu_id, cpu_model
from repro.train import checkpoint
from repro.train.loop import train_run

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def test_tiny_mt_end_to_end(tiny_root, tmp_path):
    results, run = tmp_path / "results", tmp_path / "run"
    common = ["--root", str(tiny_root), "--results", str(results)]
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--run-dir", str(run),
                            *common])
    assert r.exit_code == 0, r.output
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "completed" and status["step"] == 4
    log = [json.loads(l) for l in (run / "log.jsonl").read_text().splitlines()]
    assert {"loss", "nll", "grad_norm", "lr", "tokens_per_s"} <= set(log[0])
    assert any("valid_nll" in row for row in log)
    r = runner.invoke(app, ["evaluate", str(run), *common])
    assert r.exit_code == 0, r.output
    metrics = json.loads((run / "metrics.json").read_text())
    assert "bleu" in metrics["splits"]["test"] and metrics["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert len(metrics["checkpoints_averaged"]) == 2
    assert metrics["source_blind_nll"] > 0 and math.isfinite(metrics["source_blind_nll"])  # judging rules v2
    assert metrics["eval_hardware"]["cpu"] == cpu_model() + f" ({torch.backends.cpu.get_cpu_capability()})" and metrics["eval_hardware"]["device"].startswith("cpu")
    (rec,) = load_records(results, "tiny")
    assert rec["recipe_name"] == "6L-6L-b2t" and rec["status"] == "completed" and rec["metrics"]["bleu_average"] >= 0
    for key in ("run_id", "recipe_hash", "commit", "seed", "hardware", "started", "duration_s"):
        assert key in rec
    assert rec["hardware"]["cpu"].endswith(f"({torch.backends.cpu.get_cpu_capability()})")  # AVX2, AVX512, ...
    assert rec["hardware"].get("cpu_id", "") == cpu_id()  # e.g. "AuthenticAMD family 25 model 17"
    corpus = tiny_root / rec["data"]["corpus"]
    assert rec["data"] == corpus_fingerprint(corpus.name, read_meta(corpus))
    csv = runner.invoke(app, ["table", "1", "--scale", "tiny", "--format", "csv", "--results", str(results)]).output
    row = [l for l in csv.splitlines() if l.startswith("1,6L-6L,b2t,Average,")][0]
    assert row.endswith(",tiny,ok,1,0")  # one seed, none failed
    fig5 = tmp_path / "f5.json"
    r = runner.invoke(app, ["figure", "5", "--scale", "tiny", "--out", str(tmp_path / "f5.png"), "--json", str(fig5),
                            *common])
    assert r.exit_code == 0, r.output
    sims = json.loads(fig5.read_text())["b2t"]["encoder"]
    assert len(sims) == 6 and abs(sims[0][0] - 1) < 1e-5 and abs(sims[0][1] - sims[1][0]) < 1e-6


def test_cpu_id_names_family_and_model_of_the_first_cpu():
    x86 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n\n"
           "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n")
    assert cpu_id(x86) == "AuthenticAMD family 25 model 17"
    assert cpu_id("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n") == ""  # Arm names no family


def test_git_commit_stamps_head_and_dirty_code_but_not_results(tmp_path):
    """The commit every record carries: HEAD of the repository the code is in, -dirty for uncommitted code (not for
    a changed record under results/), $LNREPRO_COMMIT where set, "unknown" outside git."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "repro", repo / "repro", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "results").mkdir()
    (repo / "results" / "seed1.json").write_text("{}")
    git = lambda *args: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                                       capture_output=True, text=True, check=True).stdout.strip()
    stamp = lambda **env: subprocess.run(
        [sys.executable, "-c", "from repro.provenance import git_commit; print(git_commit())"], cwd=repo,
        capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "PYTHONPATH": str(repo), "GIT_CEILING_DIRECTORIES": str(tmp_path), **env}).stdout.strip()
    assert stamp() == "unknown"  # no repository yet
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "code")
    head = git("rev-parse", "HEAD")
    (repo / "results" / "seed1.json").write_text('{"a": 1}')
    assert stamp() == head
    with open(repo / "repro" / "provenance.py", "a") as f:
        f.write("# changed\n")
    assert stamp() == head + "-dirty"
    assert stamp(LNREPRO_COMMIT="abc123") == "abc123"


def test_resume_equals_uninterrupted(tiny_root, tmp_path):
    recipe = REPO / "recipes/6L-6L-pre_ln.yaml"
    sets = ["model.encoder_layers=1", "model.decoder_layers=1", "optim.max_updates=6", "train.save_interval=3",
            "train.keep_last=5"]
    full = train_run(resolve(recipe, "tiny", sets), tmp_path / "full", tiny_root)
    # "Killed" after update 3: a run that stops there, then resumed with the original length.
    train_run(resolve(recipe, "tiny", sets[:-3] + ["optim.max_updates=3", "train.save_interval=3", "train.keep_last=5"]),
              tmp_path / "cut", tiny_root)
    with pytest.raises(ValueError, match="recipe hash"):  # a longer run is another recipe: said, not silent
        train_run(resolve(recipe, "tiny", sets), tmp_path / "cut", tiny_root, resume=True)
    resumed = train_run(resolve(recipe, "tiny", sets), tmp_path / "cut", tiny_root, resume=True,
                        allow_recipe_change=True)
    assert full["step"] == resumed["step"] == 6
    # The resumed run's status keeps both stretches of training, and its start is the first one's.
    first, second = resumed["segments"]
    assert (first["from_update"], first["to_update"], second["from_update"], second["to_update"]) == (0, 3, 3, 6)
    assert resumed["started"] == first["started"] <= second["started"] and second["commit"] == resumed["commit"]
    # ...and each stretch's pace: its seconds (together the run's) and the CPU threads it trained with.
    assert first["hardware"]["threads"] == second["hardware"]["threads"] == torch.get_num_threads()
    assert first["duration_s"] >= 0 and second["duration_s"] >= 0  # a tiny stretch can round to 0.0
    assert abs(first["duration_s"] + second["duration_s"] - resumed["duration_s"]) <= 0.2
    # ...and the process's CPU seconds (did it have its cores alone): on a fast machine both tiny stretches round to 0.0
    assert all(isinstance(s["cpu_s"], float) and s["cpu_s"] >= 0 for s in (first, second))
    assert [(s["from_update"], s["to_update"]) for s in full["segments"]] == [(0, 6)]
    from repro.training_run import run_record
    whole = run_record(tmp_path / "full", full, resolve(recipe, "tiny", sets), {})
    assert "segments" not in whole and whole["cpu_s"] == full["segments"][0]["cpu_s"]
    cut = run_record(tmp_path / "cut", resumed, resolve(recipe, "tiny", sets), {})
    assert cut["segments"] == resumed["segments"] and cut["cpu_s"] == round(first["cpu_s"] + second["cpu_s"], 1)
    a = checkpoint.load(checkpoint.list_checkpoints(tmp_path / "full")[-1])["model"]
    b = checkpoint.load(checkpoint.list_checkpoints(tmp_path / "cut")[-1])["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_stopped_between_checkpoints_keeps_one_curve(tiny_root, tmp_path):
    """Stopped after logging updates 4-6 with its last checkpoint at 3: the resumed run trains 4-6 again, and its log
    holds each update once, as the uninterrupted run's does (a cut-short last line is dropped)."""
    import shutil
    recipe = REPO / "recipes/6L-6L-pre_ln.yaml"
    sets = ["model.encoder_layers=1", "model.decoder_layers=1", "optim.max_updates=6", "train.save_interval=3",
            "train.keep_last=5", "train.log_interval=1", "train.validate_interval=2"]
    train_run(resolve(recipe, "tiny", sets), tmp_path / "full", tiny_root)
    shutil.copytree(tmp_path / "full", tmp_path / "stopped")
    for name in ("checkpoint_6.pt", "checkpoint_6.pt.sha256", "status.json"):
        (tmp_path / "stopped" / name).unlink()
    with open(tmp_path / "stopped/log.jsonl", "a") as f:
        f.write('{"step": 7, "lo')
    train_run(resolve(recipe, "tiny", sets), tmp_path / "stopped", tiny_root, resume=True)
    read = lambda run: [{k: v for k, v in json.loads(l).items() if k not in ("time", "tokens_per_s")}
                        for l in (run / "log.jsonl").read_text().splitlines()]
    full, resumed = read(tmp_path / "full"), read(tmp_path / "stopped")
    assert [r["step"] for r in resumed] == [1, 2, 2, 3, 4, 4, 5, 6, 6]  # training rows, validation at 2, 4, 6
    assert resumed == full


def test_non_finite_loss_fails_cleanly(tiny_root, tmp_path):
    results = tmp_path / "results"
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-post_ln.yaml"), "--scale", "tiny",
                            "--run-dir", str(tmp_path / "run"), "--root", str(tiny_root), "--results", str(results),
                            "--set", "optim.lr=1.0", "--set", "optim.warmup_updates=1",
                            "--set", "model.encoder_layers=1", "--set", "model.decoder_layers=1",
                            "--set", "optim.max_updates=12"])  # its loss explodes at update 5
    assert r.exit_code == 0, r.output
    status = json.loads((tmp_path / "run/status.json").read_text())
    assert status["status"] == "failed" and ("became" in status["reason"] or "exploded" in status["reason"])
    (rec,) = load_records(results, "tiny")
    assert rec["status"] == "failed" and rec["overrides"]
    csv = runner.invoke(app, ["table", "1", "--scale", "tiny", "--format", "csv", "--results", str(results)]).output
    assert "1,6L-6L,post_ln,2010,24.27,,tiny,not run" in csv  # an override run never fills a table cell


def test_clear_errors_for_missing_data_and_bad_checkpoint(tiny_root, tmp_path):
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "mini",
                            "--root", str(tmp_path / "empty"), "--run-dir", str(tmp_path / "r"),
                            "--results", str(tmp_path / "res")])
    assert r.exit_code == 2 and "lnrepro prepare multi30k --source" in r.output.replace("\n", "")
    run = tmp_path / "bad"
    run.mkdir()
    (run / "checkpoint_2.pt").write_bytes(b"not a checkpoint")
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--resume",
                            "--root", str(tiny_root), "--run-dir", str(run), "--results", str(tmp_path / "res")])
    # no checksum beside it: refused unless trusted; trusted, it is read and found not to be a checkpoint
    assert r.exit_code == 2 and "checkpoint_2.pt" in r.output and "has no checkpoint_2.pt.sha256" in r.output
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--resume",
                            "--root", str(tiny_root), "--run-dir", str(run), "--results", str(tmp_path / "res"),
                            "--trust-checkpoints"])
    assert r.exit_code == 2 and "checkpoint_2.pt" in r.output and "cannot be read" in r.output
    os.environ.pop("LNREPRO_TRUST_CHECKPOINTS", None)  # --trust-checkpoints set it for that command's process
    r = runner.invoke(app, ["prepare", "multi30k", "--source", str(tmp_path / "nowhere"), "--root", str(tmp_path)])
    assert r.exit_code == 2 and "--source" in r.output
    r = runner.invoke(app, ["evaluate", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "status.json" in r.output


def torchrun_train(recipe, sets, tmp_path, tiny_root, port: int, *flags) -> None:
    """`lnrepro train` in 2 processes under torchrun (gloo on the CPU), into tmp_path/ddp and tmp_path/res."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LNREPRO_QUIET": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           "-m", "repro.cli", "train", str(recipe), "--scale", "tiny", "--run-dir", str(tmp_path / "ddp"),
           "--root", str(tiny_root), "--results", str(tmp_path / "res"), *flags]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    # a rank's own error stands before torchrun's summary of the ranks: keep enough of the tail to show it
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-8000:]


RANK_TEARDOWN = """
import os, torch, torch.distributed as dist
from repro.train.loop import destroy_distributed, setup_distributed
def threads():
    return sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
before = threads()
setup_distributed()
ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))  # imports torch._dynamo
ddp(torch.randn(2, 4)).sum().backward()
del ddp
destroy_distributed()
assert threads() == before, (before, threads())
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_torchrun_rank_ends_with_its_group_gone(tmp_path):
    """What a rank trains with is gone at its exit, before the interpreter's finalisation: the group's gloo worker
    threads have ended (one left behind aborts a finished rank, and torchrun kills the others)."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_TEARDOWN)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", "29535", str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_torchrun_two_processes_equal_update_freq_two(tiny_root, tmp_path):
    recipe = REPO / "recipes/6L-6L-b2t.yaml"
    sets = ["model.encoder_layers=1", "model.decoder_layers=1", "optim.gpus_per_update=2", "model.dropout=0.0",
            "optim.max_updates=3", "train.save_interval=3"]
    train_run(resolve(recipe, "tiny", sets), tmp_path / "single", tiny_root)
    torchrun_train(recipe, sets, tmp_path, tiny_root, 29533)
    a = checkpoint.load(checkpoint.list_checkpoints(tmp_path / "single")[-1])["model"]
    b = checkpoint.load(checkpoint.list_checkpoints(tmp_path / "ddp")[-1])["model"]
    # Same batches and gradients up to float summation order; Adam's per-coordinate normalisation turns rounding
    # in near-zero gradients into differences of order 1e-5 after three updates, far below the updates themselves.
    init = train_run(resolve(recipe, "tiny", sets[:-2] + ["optim.max_updates=1"]), tmp_path / "one", tiny_root)
    assert init["step"] == 1
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4


def test_two_processes_at_k_tokens_equal_one_at_2k(tiny_root, tmp_path):
    """--tokens-per-gpu changes how many forwards make an update, never the update: 2 processes (gloo) taking the
    recipe's batch each equal 1 process taking two batches in one forward."""
    recipe = REPO / "recipes/6L-6L-b2t.yaml"
    sets = ["model.encoder_layers=1", "model.decoder_layers=1", "optim.gpus_per_update=2", "model.dropout=0.0",
            "optim.max_updates=1", "train.save_interval=1", "train.validate_interval=1"]
    k = resolve(recipe, "tiny", sets).recipe.data.max_tokens
    one = train_run(resolve(recipe, "tiny", sets), tmp_path / "one", tiny_root, tokens_per_gpu=2 * k)
    assert one["batching"] == {"tokens_per_gpu": 2 * k, "batches_per_forward": 2, "forwards_per_update": 1}
    torchrun_train(recipe, sets, tmp_path, tiny_root, 29534, "--tokens-per-gpu", str(k))
    a = checkpoint.load(checkpoint.list_checkpoints(tmp_path / "one")[-1])["model"]
    b = checkpoint.load(checkpoint.list_checkpoints(tmp_path / "ddp")[-1])["model"]
    assert max((a[key] - b[key]).abs().max().item() for key in a) < 1e-5
    rec = json.loads(next((tmp_path / "res").rglob("seed1.json")).read_text())
    assert rec["batching"]["tokens_per_gpu"] == k and rec["recipe_hash"] == resolve(recipe, "tiny", sets).hash()
    r = runner.invoke(app, ["train", str(recipe), "--scale", "tiny", "--tokens-per-gpu", str(k + 1), "--print-config"])
    assert r.exit_code == 2 and "--tokens-per-gpu" in r.output


def test_fp16_logs_the_steps_its_loss_scaler_skipped(tiny_root, tmp_path):
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--precision", "fp16",
                            "--run-dir", str(tmp_path / "run"), "--root", str(tiny_root), "--results",
                            str(tmp_path / "res"), "--threads", "1"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(l) for l in (tmp_path / "run/log.jsonl").read_text().splitlines() if '"loss"' in l]
    assert all("fp16_skipped" in row and row["loss_scale"] > 0 for row in rows)
    rec = json.loads(next((tmp_path / "res").rglob("seed1.json")).read_text())
    # another precision than the recipe's is an override: its record is kept apart from the recipe's own
    assert rec["overrides"] == ["train.precision=fp16"] and "/overrides/" in str(next((tmp_path / "res").rglob("seed1.json")))
    assert rec["fp16_skipped_steps"] == sum(row["fp16_skipped"] for row in rows) >= 1
    assert runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--precision", "fp8"]).exit_code == 2


def test_tokens_per_gpu_print_config_keeps_the_papers_update():
    r = runner.invoke(app, ["train", str(REPO / "recipes/18L-18L-b2t.yaml"), "--tokens-per-gpu", "28672",
                            "--print-config"])
    assert r.exit_code == 0
    assert ("28,672 tokens per GPU per forward (8 of the recipe's 3,584-token batches), 16 forwards accumulated per "
            "update on each of 1 GPU(s): 458,752 tokens per update") in r.output


@pytest.mark.parametrize("variant", ["post_ln", "pre_ln", "b2t", "b2t_noln", "dlcl", "t_fixup", "deepnet", "admin"])
def test_every_variant_trains_tiny(tiny_root, tmp_path, variant):
    recipe = REPO / f"recipes/6L-6L-{variant}.yaml"
    status = train_run(resolve(recipe, "tiny", ["model.encoder_layers=2", "model.decoder_layers=2"]),
                       tmp_path / "run", tiny_root)
    assert status["status"] == "completed"
    log = [json.loads(l) for l in (tmp_path / "run/log.jsonl").read_text().splitlines() if '"loss"' in l]
    assert all(row["grad_norm"] > 0 for row in log)
    if variant == "t_fixup":
        assert log[0]["lr"] == pytest.approx(5e-4)  # no warmup: its own full rate at the first update
    if variant == "admin":
        profile = json.loads((tmp_path / "run/admin_profile.json").read_text())
        assert len(profile["encoder"]) == 2 * 2 and len(profile["decoder"]) == 3 * 2
        before = (tmp_path / "run/admin_profile.json").stat().st_mtime_ns
        train_run(resolve(recipe, "tiny", ["model.encoder_layers=2", "model.decoder_layers=2",
                                           "optim.max_updates=6"]), tmp_path / "run", tiny_root, resume=True,
                  allow_recipe_change=True)
        assert (tmp_path / "run/admin_profile.json").stat().st_mtime_ns == before  # reused, not recomputed


def test_tiny_scale_works_from_the_cli_alone(tmp_path, monkeypatch):
    """A smoke test of an install: no prepare step, the tiny corpora are generated in the data root."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--threads", "1"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "data/tiny_parallel/meta.json").is_file() and (tmp_path / "results/tiny/6L-6L-b2t/seed1.json").is_file()
    r = runner.invoke(app, ["prepare", "tiny"])
    assert r.exit_code == 0 and "already prepared" in r.output
