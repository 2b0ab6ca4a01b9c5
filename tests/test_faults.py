"""Faults and bad input: each case asserts the exact outcome, a one-line error with exit code 2 or untouched files.

Prepared corpora (rebuilt for other inputs, repaired after damage or an interrupted build), run directories
(locked, never deleted without --overwrite, never resumed under another recipe), committed records (never replaced
by another recipe or an override run), checkpoints (checksums), references (line counts).
"""

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import SHARED_DATA, tiny_pairs
from repro.cli import app
from repro.data.parallel import prepare_parallel
from repro.data.text import PrepareError, read_meta
from repro.eval import metrics

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def small_corpus(root: Path, vocab: int = 60, seed: int = 1) -> dict:
    evals = {"valid": tuple(map(list, zip(*tiny_pairs(12, 2)))), "test": tuple(map(list, zip(*tiny_pairs(6, 3))))}
    return prepare_parallel(root / "tiny_parallel", "tiny_parallel", iter(tiny_pairs(300, seed)), evals, vocab,
                            ("src", "tgt"), provenance={"generated": f"seed {seed}"})


def one_line_exit_2(result, *needles):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "error:" in result.output
    for n in needles:
        assert n in result.output.replace("\n", ""), (n, result.output)


# -- prepared corpora -----------------------------------------------------------------------------------------

def test_reprepare_other_inputs_rebuilds_same_inputs_reuses(tmp_path):
    small_corpus(tmp_path, vocab=60)
    out = tmp_path / "tiny_parallel"
    stamp = (out / "train.src.bin").stat().st_mtime_ns
    assert small_corpus(tmp_path, vocab=60)["vocab_size"] == read_meta(out)["vocab_size"]
    assert (out / "train.src.bin").stat().st_mtime_ns == stamp                 # same inputs: reused
    meta = small_corpus(tmp_path, vocab=80)
    assert meta["inputs"]["vocab_size"] == 80 and read_meta(out)["inputs"]["vocab_size"] == 80
    assert (out / "train.src.bin").stat().st_mtime_ns != stamp                 # other inputs: rebuilt, not reused
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob("*.old"))


@pytest.mark.parametrize("damage", ["truncate_bin", "delete_bin", "garble_spm", "meta_is_list", "flip_token"])
def test_damaged_corpus_is_named_and_prepare_repairs_it(tmp_path, damage):
    small_corpus(tmp_path)
    out = tmp_path / "tiny_parallel"
    target = {"truncate_bin": "train.src.bin", "delete_bin": "test.tgt.bin", "garble_spm": "spm.model",
              "meta_is_list": "meta.json", "flip_token": "valid.src.bin"}[damage]
    path = out / target
    if damage == "truncate_bin":
        path.write_bytes(path.read_bytes()[:-4])
    elif damage == "delete_bin":
        path.unlink()
    elif damage == "garble_spm":
        path.write_bytes(b"\x00" * path.stat().st_size)
    elif damage == "meta_is_list":
        path.write_text("[1, 2]\n")
    else:  # a token id changed in place: same size, other bytes (e.g. beyond the vocabulary)
        data = bytearray(path.read_bytes())
        data[0:4] = (10 ** 6).to_bytes(4, "little")
        path.write_bytes(bytes(data))
    with pytest.raises(PrepareError) as e:
        read_meta(out)
    assert target in str(e.value) and "prepare" in str(e.value) and "\n" not in str(e.value)
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--root", str(tmp_path),
                            "--run-dir", str(tmp_path / "run"), "--results", str(tmp_path / "res")])
    one_line_exit_2(r, target)
    assert not (tmp_path / "run/checkpoint_2.pt").exists()
    small_corpus(tmp_path)                                                      # the same command repairs it
    assert read_meta(out)["vocab_size"] > 0


def test_interrupted_build_resumes_and_a_stale_partial_is_discarded(tmp_path):
    out = tmp_path / "tiny_parallel"
    partial = tmp_path / "tiny_parallel.partial"
    partial.mkdir()
    (partial / "inputs.json").write_text(json.dumps({"something": "else"}))
    (partial / "train.raw.src").write_text("stale\n")
    small_corpus(tmp_path)
    assert not partial.exists() and read_meta(out)["splits"] == ["test", "train", "valid"]
    assert "stale" not in (out / "train.raw.src").read_text()


@pytest.mark.shared_data
def test_bad_archives_and_encodings_are_named(tmp_path):
    src = tmp_path / "m30k"
    shutil.copytree(SHARED_DATA / "multi30k", src)
    good = (src / "val.de.gz").read_bytes()
    (src / "val.de.gz").write_bytes(good[: len(good) // 2])                       # a truncated gzip
    one_line_exit_2(runner.invoke(app, ["prepare", "multi30k", "--source", str(src), "--root", str(tmp_path / "d")]),
                    "val.de.gz", "cannot be read")
    (src / "val.de.gz").write_bytes(gzip.compress("caf\xe9\n".encode("latin-1")))  # not UTF-8
    one_line_exit_2(runner.invoke(app, ["prepare", "multi30k", "--source", str(src), "--root", str(tmp_path / "d")]),
                    "val.de.gz", "UnicodeDecodeError")
    assert not (tmp_path / "d/multi30k/meta.json").exists()


# -- run directories and records ------------------------------------------------------------------------------

def train_args(tiny_root, tmp_path, *extra):
    return ["train", str(REPO / "recipes/6L-6L-post_ln.yaml"), "--scale", "tiny", "--root", str(tiny_root),
            "--run-dir", str(tmp_path / "run"), "--results", str(tmp_path / "results"), *extra]


def test_a_finished_run_is_kept_unless_overwrite(tiny_root, tmp_path):
    assert runner.invoke(app, train_args(tiny_root, tmp_path)).exit_code == 0
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    one_line_exit_2(runner.invoke(app, train_args(tiny_root, tmp_path)), "already holds a completed run", "--resume",
                    "--overwrite")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == before
    # a bad value fails at load and leaves the run as it was
    one_line_exit_2(runner.invoke(app, train_args(tiny_root, tmp_path, "--overwrite", "--set", "optim.lr=2")), "optim.lr")
    assert json.loads((tmp_path / "run/status.json").read_text())["status"] == "completed"
    assert runner.invoke(app, train_args(tiny_root, tmp_path, "--overwrite")).exit_code == 0


def test_resume_under_a_changed_recipe_is_refused(tiny_root, tmp_path):
    assert runner.invoke(app, train_args(tiny_root, tmp_path)).exit_code == 0
    one_line_exit_2(runner.invoke(app, train_args(tiny_root, tmp_path, "--resume", "--set", "optim.lr=0.002")),
                    "recipe hash", "--allow-recipe-change")


def test_damaged_checkpoint_is_refused_on_resume_and_evaluate(tiny_root, tmp_path):
    assert runner.invoke(app, train_args(tiny_root, tmp_path)).exit_code == 0
    ckpt = sorted((tmp_path / "run").glob("checkpoint_*.pt"))[-1]
    data = bytearray(ckpt.read_bytes())
    data[len(data) // 2] ^= 0x01                                                  # one bit inside tensor data
    ckpt.write_bytes(bytes(data))
    one_line_exit_2(runner.invoke(app, ["evaluate", str(tmp_path / "run"), "--root", str(tiny_root),
                                        "--results", str(tmp_path / "results")]), ckpt.name, "damaged")
    # resume skips the damaged newest checkpoint, saying why, and goes on from the newest intact one
    r = runner.invoke(app, train_args(tiny_root, tmp_path, "--resume"))
    previous = sorted((tmp_path / "run").glob("checkpoint_*.pt"))[0]
    assert r.exit_code == 0 and f"skipped: {ckpt}" in r.output.replace("\n", "") and "damaged" in r.output
    assert f"resumed from {previous.name}" in r.output


@pytest.mark.slow
def test_second_process_on_a_locked_run_is_refused(tiny_root, tmp_path):
    from repro.train.lock import run_lock
    (tmp_path / "run").mkdir()
    code = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path; "
            f"from repro.train.lock import run_lock\nwith run_lock(Path({str(tmp_path / 'run')!r})):\n"
            f"    print('locked', flush=True); time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        one_line_exit_2(runner.invoke(app, train_args(tiny_root, tmp_path, "--resume")), "in use by another",
                        f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    with run_lock(tmp_path / "run"):  # released when the holder died
        pass


def test_override_run_beside_a_committed_record_leaves_it_untouched(tiny_root, tmp_path):
    assert runner.invoke(app, train_args(tiny_root, tmp_path)).exit_code == 0
    committed = tmp_path / "results/tiny/6L-6L-post_ln/seed1.json"
    text = committed.read_text()
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-post_ln.yaml"), "--scale", "tiny", "--root",
                            str(tiny_root), "--run-dir", str(tmp_path / "run2"), "--results", str(tmp_path / "results"),
                            "--set", "optim.max_updates=3"])
    assert r.exit_code == 0, r.output
    assert committed.read_text() == text
    (override,) = (tmp_path / "results/tiny/overrides/6L-6L-post_ln").rglob("seed1.json")
    assert json.loads(override.read_text())["overrides"] == ["optim.max_updates=3"]
    # a record of another recipe hash in the recipe's own slot is refused before any training
    rec = json.loads(text)
    committed.write_text(json.dumps({**rec, "recipe_hash": "0123456789ab"}))
    one_line_exit_2(runner.invoke(app, train_args(tiny_root, tmp_path, "--overwrite")), "0123456789ab", "git rm")
    assert json.loads(committed.read_text())["recipe_hash"] == "0123456789ab"


def test_references_must_match_hypotheses_line_for_line():
    with pytest.raises(ValueError, match="3 hypotheses against 2 references"):
        metrics.bleu(["a b", "c d", "e f"], ["a b", "c d"])
    assert metrics.bleu(["a b c d"], ["a b c d"])[0] == pytest.approx(100.0)


@pytest.mark.parametrize("option", ["--results", "--root", "--run-dir"])
def test_a_file_where_a_folder_is_wanted_is_refused_before_training(tiny_root, tmp_path, option):
    afile = tmp_path / "afile"
    afile.write_text("x")
    args = {"--results": str(tmp_path / "results"), "--root": str(tiny_root), "--run-dir": str(tmp_path / "run")}
    args[option] = str(afile)
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny",
                            *[x for kv in args.items() for x in kv]])
    one_line_exit_2(r, option, "is a file, not a folder")
    assert afile.read_text() == "x" and not (tmp_path / "run").exists()


@pytest.mark.parametrize("args", [["figure", "3", "--out", "{f}/fig.png"],
                                  ["figure", "3", "--out", "{t}/fig.png", "--json", "{f}/sub/fig.json"],
                                  ["curves", str(REPO / "results/mini/6L-6L-b2t/seed1.log.jsonl"), "--out",
                                   "{f}/c.png"]])
def test_a_figure_under_a_file_is_refused_before_it_is_drawn(tmp_path, args, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    import repro.figures.gradients as gradients
    monkeypatch.setattr(gradients, "figure_gradients", lambda *a: pytest.fail("drawn before its target was checked"))
    r = runner.invoke(app, [a.format(f=afile, t=tmp_path) for a in args])
    one_line_exit_2(r, str(afile), "is a file, not a folder")
    assert afile.read_text() == "x" and not (tmp_path / "fig.png").exists()


def test_default_threads_divide_the_cores():
    from repro.launch import default_threads
    cores = os.cpu_count() or 1
    assert default_threads(1) == cores and default_threads(cores * 4) == 1
    assert default_threads(2) == max(1, cores // 2)


def test_user_round_two_small_surprises(tmp_path, monkeypatch):
    """Table 7 prints the learning rate as written; Figure 9's error suggests commands that work; a training that
    stops before writing anything leaves no run directory behind; --resume with nothing to resume says so."""
    from typer.testing import CliRunner
    from repro.cli import app
    runner = CliRunner()
    repo = Path(__file__).resolve().parents[1]
    md = runner.invoke(app, ["table", "7", "--format", "markdown"]).output
    assert "| Machine Translation | Learning rate | 0.001 | 0.001 |" in md  # no Metric column repeating the Row
    (tmp_path / "empty").mkdir()
    out = runner.invoke(app, ["figure", "9", "--results", str(tmp_path / "empty"), "--out", str(tmp_path / "f.png")])
    assert out.exit_code == 2 and "lnrepro train recipes/36L-36L-b2t.yaml --scale mini" in out.output
    assert (repo / "recipes/36L-36L-b2t.yaml").is_file()
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["train", str(repo / "recipes/18L-18L-b2t.yaml"), "--scale", "mini", "--root",
                            str(tmp_path / "data"), "--run-dir", str(tmp_path / "runs/x")])
    assert r.exit_code == 2 and not (tmp_path / "runs/x").exists()
    r = runner.invoke(app, ["train", str(repo / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--resume", "--run-dir",
                            str(tmp_path / "fresh"), "--root", str(tmp_path / "data"), "--results", str(tmp_path / "res")])
    assert r.exit_code == 0 and "holds no run to resume; starting a new one" in r.output


def test_train_says_which_record_it_writes_and_that_one_exists(tmp_path):
    """(And, once trained, what to run next.)"""
    from typer.testing import CliRunner
    from repro.cli import app
    runner = CliRunner()
    recipe = str(Path(__file__).resolve().parents[1] / "recipes/6L-6L-b2t.yaml")
    common = ["--scale", "tiny", "--root", str(tmp_path / "data"), "--results", str(tmp_path / "res")]
    first = runner.invoke(app, ["train", recipe, *common, "--run-dir", str(tmp_path / "a")])
    assert first.exit_code == 0 and "this run's record: " in first.output and "one exists" not in first.output
    assert f"next: lnrepro evaluate {tmp_path / 'a'} --root {tmp_path / 'data'}" in first.output.replace("\n", "")
    second = runner.invoke(app, ["train", recipe, *common, "--run-dir", str(tmp_path / "b"), "--replace-record"])
    assert second.exit_code == 0 and "(one exists: completed, started" in second.output


def test_progress_bar_says_pace_learning_rate_and_validation():
    from repro.progress import ETA_WINDOW_S
    from repro.train.loop import bar_status
    row = {"loss": 4.25, "tokens_per_s": 12345.6, "lr": 0.0005}
    assert bar_status(row, None) == "loss 4.250 12.3k tok/s lr 5e-04"
    assert bar_status(row, 3.5).endswith(" val 3.50")
    assert ETA_WINDOW_S >= 300  # the time left from minutes of pace, not rich's 30 seconds


@pytest.mark.slow
def test_a_tiny_smoke_run_changes_no_committed_file():
    """`lnrepro train ... --scale tiny` in a clone writes results/tiny/, which git ignores (and none is committed)."""
    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", "results/tiny/6L-6L-b2t/seed1.json"], cwd=repo)
    assert ignored.returncode == 0
    tracked = subprocess.run(["git", "ls-files", "results/tiny"], cwd=repo, capture_output=True, text=True).stdout
    assert tracked == ""


@pytest.mark.slow
def test_ctrl_c_checkpoints_the_update_in_flight_and_says_how_to_continue(tiny_root, tmp_path):
    """SIGINT (or SIGTERM) while training: the update in flight finishes, a checkpoint is written, no record (the run
    has not ended), exit 130 with the command that continues it; --resume then goes on from there."""
    import signal
    import time as _time
    repo = Path(__file__).resolve().parents[1]
    run, res = tmp_path / "run", tmp_path / "res"
    cmd = [sys.executable, "-m", "repro.cli", "train", str(repo / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny",
           "--root", str(tiny_root), "--results", str(res), "--run-dir", str(run), "--threads", "1",
           "--set", "optim.max_updates=100000", "--set", "train.save_interval=100000"]
    env = {**os.environ, "LNREPRO_QUIET": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = _time.time() + 120
    while _time.time() < deadline and not ((run / "log.jsonl").is_file() and
                                           len((run / "log.jsonl").read_text().splitlines()) >= 3):
        _time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "stopped by SIGINT at update" in out and "--resume" in out and "Traceback" not in out
    assert "--threads 1" in out and f"--results {res}" in out  # the command that continues it, options kept
    (ckpt,) = [p for p in run.glob("resume_*.pt")]  # a checkpoint to resume from, never averaged
    assert not list(run.glob("checkpoint_*.pt"))
    step = int(ckpt.stem.split("_")[1])
    assert step >= 3 and not (run / "status.json").exists() and not res.exists()
    again = cmd[:-4] + ["--set", f"optim.max_updates={step + 2}", "--set", "train.save_interval=100000", "--resume",
                        "--allow-recipe-change"]
    done = subprocess.run(again, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((run / "status.json").read_text())["step"] == step + 2


def test_a_native_crash_prints_the_python_stack_it_hit():
    """A crash below Python (a segfault, glibc aborting on a corrupted heap) leaves, in the run's log, the Python
    lines that were running, not only the C library's one line."""
    code = ("import ctypes, sys\n"
            "from repro.cli import entry\n"
            "sys.argv = ['lnrepro', '--version']\n"
            "try:\n    entry()\nexcept SystemExit:\n    pass\n"
            "def crash_here():\n    ctypes.string_at(0)\n"
            "crash_here()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "Fatal Python error: Segmentation fault" in done.stderr and "crash_here" in done.stderr
    # with no stderr to print to (closed), the command still runs
    closed = subprocess.run([sys.executable, "-m", "repro.cli", "--version"],
                            stdout=subprocess.PIPE, text=True, timeout=60, preexec_fn=lambda: os.close(2))
    assert closed.returncode == 0 and closed.stdout.startswith("lnrepro ")


def test_user_text_is_printed_literally(tmp_path):
    """Brackets in a value, a path or a recipe are text, never markup: no crash, nothing swallowed."""
    from typer.testing import CliRunner
    from repro.cli import app
    runner = CliRunner()
    recipe = str(Path(__file__).resolve().parents[1] / "recipes/6L-6L-b2t.yaml")
    for value in ("a[/b]", "[red]x", "x[bold]"):
        r = runner.invoke(app, ["train", recipe, "--set", f"model.variant={value}", "--print-config"])
        assert r.exit_code == 2 and f"'{value}' is not a known variant" in r.output, r.output
    odd = tmp_path / "we[ird]"
    odd.mkdir()
    (odd / "r.yaml").write_text("task: 'x[/y]'\n")
    r = runner.invoke(app, ["train", str(odd / "r.yaml"), "--print-config"])
    assert r.exit_code == 2 and "we[ird]" in r.output and "'x[/y]'" in r.output, r.output


def test_arguments_out_of_range_are_one_line_before_any_work(tmp_path, monkeypatch):
    """Each: exit 2, one line naming the option, nothing trained or written."""
    repo = Path(__file__).resolve().parents[1]
    recipe = str(repo / "recipes/6L-6L-b2t.yaml")
    env = {**os.environ, "LNREPRO_QUIET": "1"}
    cases = [
        (["train", recipe, "--scale", "tiny", "--threads", "1000000"], "--threads"),
        (["train", recipe, "--scale", "tiny", "--threads", "0"], "--threads"),
        (["reproduce", "1", "--scale", "tiny", "--threads", "-3"], "--threads"),
        (["train", recipe, "--scale", "tiny", "--run-dir", ""], "--run-dir"),
        (["train", recipe, "--seed", "abc"], "--seed"),
        (["prepare", "multi30k", "--vocab-size", "0"], "--vocab-size"),
        (["prepare", "multi30k", "--vocab-size", "-5"], "--vocab-size"),
        (["figure", "3", "--layers", "0"], "--layers"),
        (["figure", "3", "--d-model", "0"], "--d-model"),
        (["figure", "3", "--d-model", "12"], "--d-model"),
        (["figure", "3", "--updates", "-5"], "--updates"),
        (["table", "1", "--results", str(tmp_path / "nonexistent")], "--results"),
        (["claims", "--results", str(tmp_path / "nonexistent")], "--results"),
    ]
    for args, option in cases:
        r = subprocess.run([sys.executable, "-m", "repro.cli", *args], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
        lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
        assert r.returncode == 2 and len(lines) == 1 and option in lines[0], (args, r.stdout + r.stderr)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()
    # a --results folder that cannot be written is refused before training (root can write anywhere: simulated)
    from typer.testing import CliRunner
    import repro.cli
    real_access = os.access
    monkeypatch.setattr(repro.options.os, "access", lambda path, mode: False if mode == os.W_OK else real_access(path, mode))
    r = CliRunner().invoke(repro.cli.app, ["train", recipe, "--scale", "tiny", "--results", str(tmp_path / "ro"),
                                           "--run-dir", str(tmp_path / "run")])
    assert r.exit_code == 2 and "is not writable" in r.output and not (tmp_path / "run").exists()


def test_a_finished_record_is_replaced_only_when_asked_and_names_what_trained(tiny_root, tmp_path):
    """Another run of the same recipe and seed never replaces a finished, evaluated record unannounced; evaluate
    writes the hash the run trained under, not today's file's; and refuses a corpus prepared otherwise."""
    import shutil
    from typer.testing import CliRunner
    from repro.cli import app
    runner = CliRunner()
    recipe_dir = tmp_path / "recipes"
    recipe_dir.mkdir()
    repo = Path(__file__).resolve().parents[1]
    shutil.copytree(repo / "recipes/base", recipe_dir / "base")
    recipe = recipe_dir / "6L-6L-b2t.yaml"
    shutil.copy(repo / "recipes/6L-6L-b2t.yaml", recipe)
    common = ["--scale", "tiny", "--root", str(tiny_root), "--results", str(tmp_path / "res")]
    assert runner.invoke(app, ["train", str(recipe), *common, "--run-dir", str(tmp_path / "a")]).exit_code == 0
    assert runner.invoke(app, ["evaluate", str(tmp_path / "a"), *common[2:]]).exit_code == 0
    (slot,) = (tmp_path / "res").rglob("seed1.json")
    evaluated = json.loads(slot.read_text())
    assert evaluated["metrics"]
    again = runner.invoke(app, ["train", str(recipe), *common, "--run-dir", str(tmp_path / "b")])
    assert again.exit_code == 2 and "--replace-record" in again.output and not (tmp_path / "b").exists()
    assert json.loads(slot.read_text()) == evaluated
    # the recipe file edited after training (its record removed, as the refusal says): evaluate keeps the run's hash
    slot.unlink()
    recipe.write_text(recipe.read_text() + "eval: {beam: 3}\n")
    r = runner.invoke(app, ["evaluate", str(tmp_path / "a"), *common[2:]])
    assert r.exit_code == 0, r.output
    assert json.loads(slot.read_text())["recipe_hash"] == evaluated["recipe_hash"]
    # a corpus prepared otherwise than the one the run trained on is refused, naming both
    meta = tiny_root / "tiny_parallel" / "meta.json"
    saved = meta.read_text()
    try:
        data = json.loads(saved)
        data["files"]["extra.txt"] = {"bytes": 1}
        (meta.parent / "extra.txt").write_text("x")
        meta.write_text(json.dumps(data))
        r = runner.invoke(app, ["evaluate", str(tmp_path / "a"), *common[2:], "--replace-record"])
        assert r.exit_code == 2 and "prepared otherwise" in r.output and evaluated["data"]["files_sha256"] in r.output
    finally:
        meta.write_text(saved)
        (meta.parent / "extra.txt").unlink(missing_ok=True)


def test_a_full_disk_during_a_checkpoint_leaves_the_previous_one_newest(tmp_path, monkeypatch):
    import errno
    import torch
    from repro.train import checkpoint
    checkpoint.save({"x": 1}, tmp_path, 10, keep_last=3)

    def full(state, path):
        Path(path).write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.save({"x": 2}, tmp_path, 20, keep_last=3)
    assert "no space left on the disk of" in str(e.value) and "checkpoint_10.pt stays the newest" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_10.pt", "checkpoint_10.pt.sha256"]


def test_resuming_a_finished_run_adds_no_second_validation_row(tiny_root, tmp_path):
    sets = ["--set", "optim.max_updates=5", "--set", "train.validate_interval=2"]
    first = runner.invoke(app, train_args(tiny_root, tmp_path) + sets)
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, train_args(tiny_root, tmp_path, "--resume", "--replace-record") + sets)
    assert again.exit_code == 0, again.output
    rows = [json.loads(l) for l in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert sum(1 for r in rows if r.get("step") == 5 and "valid_nll" in r) == 1


def test_empty_inputs_are_refused_not_scored():
    from repro.eval import metrics
    for score in (lambda h, r: metrics.bleu(h, r), metrics.rouge, metrics.wer):
        with pytest.raises(ValueError, match="no sentences to score"):
            score([], [])
        with pytest.raises(ValueError, match="1 hypotheses against 2 references"):
            score(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="hold no words"):
        metrics.wer(["a b c"], [""])
    from repro.data.parallel import prepare_parallel
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        with pytest.raises(ValueError, match="test: the split is empty"):
            prepare_parallel(Path(d) / "c", "c", iter([("a b", "c d")] * 50), {"test": ([], [])}, 60, ("en", "de"),
                             provenance={})


def test_a_garbled_status_or_log_names_its_file(tiny_root, tmp_path):
    assert runner.invoke(app, train_args(tiny_root, tmp_path)).exit_code == 0
    status = tmp_path / "run" / "status.json"
    status.write_text("{garbled")
    r = runner.invoke(app, ["evaluate", str(tmp_path / "run"), "--root", str(tiny_root), "--results",
                            str(tmp_path / "results"), "--replace-record"])
    one_line_exit_2(r, str(status), "not valid JSON")
    from repro.files import read_jsonl
    log = tmp_path / "run" / "log.jsonl"
    log.write_text(log.read_text() + "{cut\n")
    with pytest.raises(ValueError, match=r"log.jsonl: line \d+ is not JSON"):
        read_jsonl(log)


def test_every_reader_validates_records_against_one_schema(tmp_path):
    """A record no reader could use is named with its field, never dropped or miscounted; a stale one is listed."""
    from repro.results import write_record
    from test_tables import record
    good = record("6L-6L-b2t", 1, metrics={"bleu_average": 30.0}, encoder_layers=6, decoder_layers=6)
    path = write_record(tmp_path, good)
    cases = [([1, 2], "(top level)"), ({k: v for k, v in good.items() if k != "status"}, "status: missing"),
             ({**good, "metrics": {"bleu_average": "30.95"}}, "metrics.bleu_average"),
             ({**good, "seed": 2}, "seed: 2 is not the seed its file name says"),
             ({**good, "status": "done"}, "status: 'done'")]
    for bad, field in cases:
        path.write_text(json.dumps(bad))
        for args in (["table", "1", "--scale", "mini"], ["claims"], ["runs"]):
            r = runner.invoke(app, [*args, "--results", str(tmp_path)])
            assert r.exit_code == 2 and str(path) in r.output and field in r.output, (args, r.output)
    path.write_text(json.dumps({**good, "recipe_hash": "0ld0ld0ld0ld"}))  # another recipe version: stale, listed
    md = runner.invoke(app, ["table", "1", "--scale", "mini", "--results", str(tmp_path), "--format", "markdown"])
    assert "6L-6L B2T connection: 6L-6L-b2t: 1 stale record" in md.output


def test_every_prepared_file_is_checked_and_token_ids_stay_in_the_vocabulary(tmp_path):
    import numpy as np
    from repro.checksum import sha256_file
    from repro.data.text import PrepareError, file_facts, read_meta
    from repro.data.tiny import ensure_tiny_corpora
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (17 << 20))
    assert "sha256" in file_facts(big)  # files over 16 MB too (they were checked by size only)
    ensure_tiny_corpora(tmp_path)
    corpus = tmp_path / "tiny_parallel"
    src = corpus / "train.src.bin"
    ids = np.fromfile(src, dtype=np.int32)
    ids[:] = 5                                    # same size, other content: caught by its checksum
    ids.tofile(src)
    with pytest.raises(PrepareError, match="train.src.bin: its contents changed"):
        read_meta(corpus)
    meta = json.loads((corpus / "meta.json").read_text())
    ids[0] = meta["vocab_size"] + 7               # an id past the vocabulary, in a file whose checksum says it is so
    ids.tofile(src)
    meta["files"]["train.src.bin"]["sha256"] = sha256_file(src)
    (corpus / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(PrepareError, match=f"token id {meta['vocab_size'] + 7} lies outside the vocabulary"):
        read_meta(corpus)


def test_a_full_disk_during_a_record_write_leaves_no_temporary(tmp_path, monkeypatch):
    import errno
    from repro.files import atomic_write_text
    target = tmp_path / "seed1.json"
    target.write_text("old")
    real = Path.write_text

    def full(self, *a, **k):
        real(self, "half")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="seed1.json: No space left on device; nothing half-written is left"):
        atomic_write_text(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["seed1.json"]


def test_a_figure_that_cannot_be_written_names_it_and_leaves_no_temporary(tmp_path, monkeypatch):
    import errno

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from repro.figures.output import save_figure
    out = tmp_path / "figure3.png"
    out.write_bytes(b"old")
    real = Figure.savefig

    def full(self, path, **k):
        real(self, path, **k)
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(Figure, "savefig", full)
    with pytest.raises(OSError, match="figure3.png: No space left on device; nothing half-written is left"):
        save_figure(plt.figure(), out, None, {})
    assert out.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["figure3.png"]


def test_two_prepares_at_once_on_a_fresh_root_both_succeed(tmp_path):
    env = {**os.environ, "LNREPRO_QUIET": "1"}
    cmd = [sys.executable, "-m", "repro.cli", "prepare", "tiny", "--root", str(tmp_path / "data")]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    from repro.data.text import read_meta
    assert read_meta(tmp_path / "data" / "tiny_parallel")["vocab_size"] > 0
    assert not any((tmp_path / "data").glob("*.partial"))


@pytest.mark.slow
def test_killing_reproduce_stops_its_trainings(tiny_root, tmp_path):
    """kill -9 of `reproduce` (no clean-up of its own can run) still stops the trainings it started."""
    import signal
    import time as _time
    env = {**os.environ, "LNREPRO_QUIET": "1"}
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
            "from pathlib import Path\nfrom repro.launch import Job, run_jobs\n"
            f"job = Job('sleeper', [['train', {str(REPO / 'recipes/6L-6L-b2t.yaml')!r}, '--scale', 'tiny', "
            f"'--root', {str(tiny_root)!r}, '--results', {str(tmp_path / 'res')!r}, '--run-dir', "
            f"{str(tmp_path / 'run')!r}, '--set', 'optim.max_updates=100000', '--set', "
            f"'train.save_interval=100000']], Path({str(tmp_path / 'job.log')!r}), Path({str(tmp_path / 'run')!r}))\n"
            "run_jobs([job], 1, 1)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], env=env)
    deadline = _time.time() + 120
    while _time.time() < deadline and not (tmp_path / "run" / "log.jsonl").is_file():
        _time.sleep(0.2)
    from repro.train.lock import lock_holder
    child = lock_holder(tmp_path / "run")
    assert child
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = _time.time() + 60
    while _time.time() < deadline and lock_holder(tmp_path / "run"):
        _time.sleep(0.2)
    assert lock_holder(tmp_path / "run") is None  # the training stopped with its launcher
    assert list((tmp_path / "run").glob("resume_*.pt"))  # and checkpointed on its way out (to resume from)


def test_hostile_round_three_inputs_are_one_line(tmp_path):
    """A recipe's `scales` as a list, a run folder whose status.json is a list, lacks its recipe or names a file
    outside recipes/, --seeds that are not plain decimal ranges or too many: each one line, exit 2."""
    from repro.training_run import MAX_GROUP_SEEDS, parse_seeds
    bad = REPO / "recipes" / "zz-scales-list.yaml"
    bad.write_text("base: base/mt.yaml\nmodel: {variant: b2t, encoder_layers: 6, decoder_layers: 6}\n"
                   "scales: [mini, tiny]\n")
    try:
        one_line_exit_2(runner.invoke(app, ["train", str(bad), "--scale", "tiny", "--print-config"]),
                        "scales: ['mini', 'tiny'] is not a mapping")
    finally:
        bad.unlink()
    for status, needle in (([1, 2], "expected a JSON object"), ({"status": "completed", "scale": "tiny"},
                                                                 "recipe: None"),
                           ({"status": "completed", "scale": "tiny", "recipe": "/etc/passwd"},
                            "is not a recipe below a recipes/ folder")):
        run = tmp_path / f"run{len(needle)}"
        run.mkdir()
        (run / "status.json").write_text(json.dumps(status))
        one_line_exit_2(runner.invoke(app, ["evaluate", str(run), "--results", str(tmp_path / "res")]), needle)
        assert not (tmp_path / "res").exists()
    for text in ("1_000", "+1", "1-", "\u0661", "1-2-3"):
        with pytest.raises(ValueError, match="is not a seed or a range"):
            parse_seeds(text)
    with pytest.raises(ValueError, match=f"more than {MAX_GROUP_SEEDS} seeds"):
        parse_seeds("1-1000")
    # errors that name their file: a data root that is a file; a log that is not UTF-8
    afile = tmp_path / "afile"
    afile.write_text("")
    one_line_exit_2(runner.invoke(app, ["prepare", "tiny", "--root", str(afile)]),
                    f"--root {afile}: {afile} is a file, not a folder")
    run = tmp_path / "latin1"
    run.mkdir()
    (run / "log.jsonl").write_bytes(b'{"step": 1, "loss": 2.0}\n{"note": "\xe9"}\n')
    one_line_exit_2(runner.invoke(app, ["curves", str(run), "--out", str(tmp_path / "c.png")]),
                    f"{run / 'log.jsonl'}: line 2 is not JSON in UTF-8")


def test_an_odd_stop_file_still_stops_the_run_with_its_text(tmp_path):
    from repro.train.loop import read_stop
    for text, reason in (('{"reason": "settled"}', "settled"), ("[1, 2]", "stop requested (stop.json: [1, 2])"),
                         ('{"why": 3}', 'stop requested (stop.json: {"why": 3})'), ("", "stop requested (stop.json: "
                                                                                        "empty)")):
        (tmp_path / "stop.json").write_text(text)
        assert read_stop(tmp_path / "stop.json") == reason
    (tmp_path / "stop.json").write_bytes(b"\xff\xfe")
    assert read_stop(tmp_path / "stop.json").startswith("stop requested (stop.json:")


def test_a_wall_time_checkpoint_is_resumed_from_and_never_averaged(tiny_root, tmp_path, monkeypatch):
    """Between save_interval checkpoints a run checkpoints on wall time (resume_<update>.pt, every
    $LNREPRO_CHECKPOINT_MINUTES): resumed from, replaced by the next one, and left out of evaluation's average."""
    from repro.config import resolve
    from repro.train import checkpoint
    from repro.train.loop import train_run
    monkeypatch.setattr(checkpoint, "RESUME_MINUTES", 0.0)  # due at every log line
    r = resolve(REPO / "recipes/6L-6L-post_ln.yaml", "tiny", ["optim.max_updates=6", "train.save_interval=4",
                                                               "train.log_interval=1"])
    status = train_run(r, tmp_path / "run", tiny_root)
    assert status["status"] == "completed"
    names = sorted(p.name for p in (tmp_path / "run").glob("*.pt"))
    assert names == ["checkpoint_4.pt", "checkpoint_6.pt"]  # each resume_*.pt dropped once a newer one landed
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path / "run")] == names
    (tmp_path / "run" / "resume_5.pt").write_bytes((tmp_path / "run" / "checkpoint_4.pt").read_bytes())
    assert [p.name for p in checkpoint.resumable(tmp_path / "run")] == ["checkpoint_4.pt", "resume_5.pt",
                                                                         "checkpoint_6.pt"]
    assert "resume_5.pt" not in [p.name for p in checkpoint.list_checkpoints(tmp_path / "run")]


def test_resuming_a_finished_run_keeps_its_record_and_a_group_writes_a_lost_one(tiny_root, tmp_path):
    """`--resume` of a finished, evaluated run leaves its record (metrics and all) as it is; a grouped member's
    record lost to a kill between its status.json and its record is written when the group is resumed."""
    assert runner.invoke(app, train_args(tiny_root, tmp_path)).exit_code == 0
    assert runner.invoke(app, ["evaluate", str(tmp_path / "run"), "--root", str(tiny_root), "--results",
                               str(tmp_path / "results")]).exit_code == 0
    (record,) = (tmp_path / "results").rglob("seed1.json")
    before = record.read_text()
    assert json.loads(before)["metrics"]
    r = runner.invoke(app, train_args(tiny_root, tmp_path, "--resume"))
    assert r.exit_code == 0 and "is kept" in r.output.replace("\n", "") and record.read_text() == before
    group = ["train", str(REPO / "recipes/6L-6L-post_ln.yaml"), "--scale", "tiny", "--seeds", "1-2", "--run-dir",
             str(tmp_path / "group"), "--root", str(tiny_root), "--results", str(tmp_path / "gres")]
    assert runner.invoke(app, group).exit_code == 0
    lost = next((tmp_path / "gres").rglob("seed2.json"))
    lost.unlink()
    assert runner.invoke(app, [*group, "--resume"]).exit_code == 0 and lost.is_file()


def test_a_group_never_throws_away_a_run_trained_alone_in_a_members_folder(tiny_root, tmp_path):
    """`train --seeds 1-3 --resume` where seed 2's folder holds an unfinished run trained alone: one line that says
    how to go on, and that run's checkpoints and log untouched."""
    sets = ["--set", "train.save_interval=2"]
    from repro.config import resolve
    tag = resolve(REPO / "recipes/6L-6L-post_ln.yaml", "tiny", sets[1:]).hash()  # a --set run's folder names it
    alone = tmp_path / "runs" / f"6L-6L-post_ln-tiny-{tag}-s2"
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-post_ln.yaml"), "--scale", "tiny", "--seed", "2",
                            "--run-dir", str(alone), "--root", str(tiny_root), "--results", str(tmp_path / "res"),
                            *sets])
    assert r.exit_code == 0
    (alone / "status.json").unlink()  # as if killed after its last checkpoint
    before = sorted(p.name for p in alone.iterdir())
    group = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-post_ln.yaml"), "--scale", "tiny", "--seeds",
                                "1-3", "--run-dir", str(tmp_path / "runs"), "--root", str(tiny_root), "--results",
                                str(tmp_path / "res"), "--resume", *sets])
    one_line_exit_2(group, "holds a run trained alone", "--seed 2")
    assert sorted(p.name for p in alone.iterdir()) == before


def test_a_record_counts_only_in_its_own_folder_and_a_fifo_or_folder_is_refused(tmp_path):
    """A copy of a record in another folder would count as another seed of that folder's cell; a recipe name that
    climbs out of recipes/ names no recipe; a FIFO named like a record would hang a reader; a folder is none."""
    from repro.results import RecordError, load_records
    rec = {"recipe_name": "6L-6L-b2t", "recipe_hash": "h", "scale": "tiny", "seed": 1, "status": "completed",
           "task": "mt", "metrics": {}}
    good = tmp_path / "tiny" / "6L-6L-b2t" / "seed1.json"
    good.parent.mkdir(parents=True)
    good.write_text(json.dumps(rec))
    assert len(load_records(tmp_path, "tiny")) == 1
    copy = tmp_path / "tiny" / "copy-of-b2t" / "seed1.json"
    copy.parent.mkdir()
    copy.write_text(json.dumps(rec))
    with pytest.raises(RecordError, match="filed elsewhere"):
        load_records(tmp_path, "tiny")
    copy.unlink()
    good.write_text(json.dumps({**rec, "recipe_name": "../../etc/passwd"}))
    with pytest.raises(RecordError, match="not a recipe below recipes/"):
        load_records(tmp_path, "tiny")
    good.write_text(json.dumps(rec))
    os.mkfifo(tmp_path / "tiny" / "6L-6L-b2t" / "seed2.json")
    with pytest.raises(RecordError, match="not a regular file"):
        load_records(tmp_path, "tiny")


def test_evaluate_waits_for_no_training_it_is_refused_while_one_holds_the_run(tiny_root, tmp_path):
    from repro.train.lock import run_lock
    assert runner.invoke(app, train_args(tiny_root, tmp_path)).exit_code == 0
    with run_lock(tmp_path / "run"):  # a training (say `--overwrite`) holds the folder
        one_line_exit_2(runner.invoke(app, ["evaluate", str(tmp_path / "run"), "--root", str(tiny_root),
                                            "--results", str(tmp_path / "results")]), "is in use by another")
    assert not list((tmp_path / "results").rglob("seed1.json"))[0].read_text().count('"bleu_average"')


def test_an_output_length_past_any_sentence_is_refused(tmp_path):
    for key, value in (("eval.max_len_a", "1.0e+300"), ("eval.max_len_b", "10000000")):
        one_line_exit_2(runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny",
                                            "--set", f"{key}={value}", "--print-config"]), key, "must lie in")


def test_resume_leaves_a_run_ended_at_a_stop_request_as_it_ended(tiny_root, tmp_path):
    """A run ended by its stop.json is complete: `--resume` trains nothing more (its status, log and record stay as
    they were) and says its record is kept."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "stop.json").write_text('["odd", "but a request"]\n')
    args = ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--root", str(tiny_root), "--run-dir",
            str(run), "--results", str(tmp_path / "res")]
    assert runner.invoke(app, args).exit_code == 0
    before = {p.name: p.read_bytes() for p in (run / "status.json", run / "log.jsonl")}
    record = tmp_path / "res/tiny/6L-6L-b2t/seed1.json"
    kept = record.read_bytes()
    assert json.loads(before["status.json"])["step"] < 4  # stopped before max_updates
    r = runner.invoke(app, [*args, "--resume"])
    assert r.exit_code == 0 and "is kept" in r.output, r.output
    assert {p.name: p.read_bytes() for p in (run / "status.json", run / "log.jsonl")} == before
    assert record.read_bytes() == kept
