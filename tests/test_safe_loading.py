"""No file the suite reads runs code: a crafted checkpoint, lnrepro's own or a fairseq one, is refused with one line
that names the file and the global it refused, and the command it would have run leaves no trace."""

import builtins
import os
import pickle
import shutil
from argparse import Namespace
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from repro.checksum import sha256_file
from repro.cli import app
from repro.train import checkpoint

REPO = Path(__file__).resolve().parents[1]
FAIRSEQ = REPO / "tests/fixtures/reference/fairseq_checkpoint"
runner = CliRunner()


class Shell:
    """Unpickling this runs a shell command (os.system)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class Exec:
    """Unpickling this runs Python code through builtins.exec (or eval)."""

    def __init__(self, marker: Path, how=builtins.exec):
        self.marker, self.how = marker, how

    def __reduce__(self):
        return self.how, (f"open({str(self.marker)!r}, 'w').close()",)


def write(path: Path, obj, legacy: bool = False, raw: bool = False) -> Path:
    if raw:
        path.write_bytes(pickle.dumps(obj, protocol=2))
    else:
        torch.save(obj, path, _use_new_zipfile_serialization=not legacy)
    path.with_name(path.name + ".sha256").write_text(sha256_file(path) + "\n")  # whoever wrote it wrote both
    return path


def one_line_refused(result, path: Path, *needles):
    out = result.output.replace("\n", "")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert str(path) in out and "refused" in out, result.output
    for n in needles:
        assert n in out, (n, result.output)


@pytest.mark.parametrize("form", ["zip", "legacy", "raw"])
def test_a_crafted_own_checkpoint_is_refused_before_anything_runs(tmp_path, form):
    marker = tmp_path / "ran"
    path = write(tmp_path / "checkpoint_2.pt", {"model": {"w": torch.zeros(2)}, "step": 2, "x": Shell(marker)},
                 legacy=form == "legacy", raw=form == "raw")
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.load(path)
    assert not marker.exists()
    assert str(path) in str(e.value) and ("refused" in str(e.value) or "cannot be read" in str(e.value))
    if form == "zip":  # torch names the global in a zip checkpoint without running anything
        assert "refused" in str(e.value) and "system" in str(e.value)


def test_an_own_checkpoint_of_an_older_version_still_loads(tmp_path):
    """Checkpoints written before records kept torch's version as a plain string hold torch's TorchVersion."""
    path = write(tmp_path / "checkpoint_2.pt", {"model": {"w": torch.ones(2)}, "hardware": {"torch": torch.__version__},
                                                "rng": {"torch": torch.get_rng_state(), "python": __import__(
                                                    "random").getstate()}})
    state = checkpoint.load(path)
    assert state["hardware"]["torch"] == str(torch.__version__) and torch.equal(state["model"]["w"], torch.ones(2))


def test_evaluate_and_resume_refuse_a_planted_checkpoint(tiny_root, tmp_path):
    run = tmp_path / "run"
    train = ["train", str(REPO / "recipes/6L-6L-post_ln.yaml"), "--scale", "tiny", "--root", str(tiny_root),
             "--run-dir", str(run), "--results", str(tmp_path / "results")]
    assert runner.invoke(app, train).exit_code == 0
    newest = sorted(run.glob("checkpoint_*.pt"), key=lambda p: int(p.stem.split("_")[1]))[-1]
    state = torch.load(newest, weights_only=True)
    marker = tmp_path / "ran"
    write(newest, {**state, "extra": Shell(marker)})
    one_line_refused(runner.invoke(app, ["evaluate", str(run), "--root", str(tiny_root), "--results",
                                         str(tmp_path / "results")]), newest, "system")
    r = runner.invoke(app, [*train, "--resume"])  # resume skips it, saying why, and nothing of it runs
    assert "refused" in r.output and not marker.exists()


def fairseq_state(extra: dict | None = None) -> dict:
    real = torch.load(FAIRSEQ / "checkpoint_best.pt", weights_only=False)  # the fixture: written by fairseq itself
    return {**real, **(extra or {})}


@pytest.mark.parametrize("payload", ["shell", "exec", "eval", "in_model", "raw"])
def test_a_crafted_fairseq_checkpoint_is_refused_by_score_fairseq(tmp_path, payload):
    marker = tmp_path / "ran"
    evil = {"shell": Shell(marker), "exec": Exec(marker), "eval": Exec(marker, builtins.eval),
            "in_model": Shell(marker), "raw": Exec(marker)}[payload]
    path = tmp_path / "model.pt"
    if payload == "in_model":
        state = fairseq_state()
        state["model"] = OrderedDict(state["model"], planted=evil)
        write(path, state)
    else:
        write(path, fairseq_state({"extra_state": {"x": evil}}), raw=payload == "raw")
    source = tmp_path / "s.txt"
    source.write_text("a b\n")
    r = runner.invoke(app, ["score-fairseq", str(path), "--dict", str(FAIRSEQ / "dict.en.txt"), "--source",
                            str(source), "--tokenizer", "none", "--out", str(tmp_path / "out.txt")])
    assert not marker.exists()
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    if payload != "raw":
        want = {"shell": "system", "in_model": "system", "exec": "builtin__.exec", "eval": "builtin__.eval"}[payload]
        one_line_refused(r, path, want)


def test_fairseq_checkpoints_of_both_forms_and_the_legacy_format_still_load(tmp_path):
    from repro.eval.fairseq_import import read_checkpoint
    for name in ("checkpoint_best.pt", "checkpoint_cfg.pt"):
        weights, args = read_checkpoint(FAIRSEQ / name)
        assert "encoder.embed_tokens.weight" in weights and args.get("encoder_attention_heads")
    legacy = write(tmp_path / "legacy.pt", fairseq_state({"args": Namespace(**vars(fairseq_state()["args"]))}),
                   legacy=True)
    weights, args = read_checkpoint(legacy)
    assert torch.equal(weights["encoder.embed_tokens.weight"],
                       read_checkpoint(FAIRSEQ / "checkpoint_best.pt")[0]["encoder.embed_tokens.weight"])
    shutil.rmtree(tmp_path)
