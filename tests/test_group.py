"""Seeds trained as one group (repro/train/group.py): each member is its seed's standalone run."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from repro.cli import app
from repro.training_run import parse_seeds
from repro.config import resolve
from repro.data.text import PAD, read_meta
from repro.model.build import build_model
from repro.train import checkpoint
from repro.train.group import check_group, pad_rows
from repro.train.loop import RunDirError, train_group, train_run
from repro.train.optim import load_optimizer_state, make_optimizer

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes/6L-6L-post_ln.yaml"
SMALL = ["model.encoder_layers=2", "model.decoder_layers=2", "train.log_interval=1"]
NO_DROPOUT = ["model.dropout=0.0", "model.attention_dropout=0.0", "model.activation_dropout=0.0"]


def log_rows(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(l).items() if k not in ("time", "tokens_per_s")}
            for l in (run / "log.jsonl").read_text().splitlines()]


def key_bias(name: str, t: torch.Tensor):
    """The key projection's bias, whose gradient is zero in exact arithmetic (a softmax ignores a shift common to
    all its scores): what it gets is rounding noise, which Adam scales up to steps of the learning rate, so two
    computations that round differently move it differently."""
    if name.endswith("qkv_proj.bias"):
        return slice(t.numel() // 3, 2 * t.numel() // 3)
    if name.endswith("kv_proj.bias"):
        return slice(0, t.numel() // 2)
    return None


def test_a_group_without_dropout_equals_its_standalone_runs(tiny_root, tmp_path):
    """Three members: seeds 1 and 2, and a third at a learning rate that makes it fail at update 3 while the others
    go on. Each member's log (losses, gradient norms, validations), end and weights are its standalone run's."""
    sets = SMALL + NO_DROPOUT + ["optim.max_updates=8", "train.save_interval=4"]
    recipes = [resolve(RECIPE, "tiny", sets + ["train.seed=1"]), resolve(RECIPE, "tiny", sets + ["train.seed=2"]),
               resolve(RECIPE, "tiny", sets + ["train.seed=3", "optim.lr=1.0", "optim.warmup_updates=1"])]
    singles = [train_run(r, tmp_path / f"single{i}", tiny_root) for i, r in enumerate(recipes)]
    ended = []
    group = train_group(recipes, [tmp_path / f"member{i}" for i in range(3)], tiny_root,
                        on_finish=lambda i, status: ended.append((i, status["step"])))
    assert [(s["status"], s["step"]) for s in singles] == [("completed", 8), ("completed", 8), ("failed", 3)]
    assert ended == [(2, 3), (0, 8), (1, 8)]  # the failed member ended when it failed, not with the group
    for i, (single, member) in enumerate(zip(singles, group)):
        assert (member["status"], member["step"], member["reason"]) == (single["status"], single["step"],
                                                                        single["reason"])
        assert member["group"] == {"runs": [str(tmp_path / f"member{j}") for j in range(3)], "seeds": [1, 2, 3]}
        a, b = log_rows(tmp_path / f"single{i}"), log_rows(tmp_path / f"member{i}")
        assert [r["step"] for r in a] == [r["step"] for r in b]
        for x, y in zip(a, b):
            for key in ("loss", "nll", "grad_norm", "valid_nll", "lr"):
                if key in x:
                    assert y[key] == pytest.approx(x[key], rel=1e-5), (i, x["step"], key)
    for i in (0, 1):
        ca = checkpoint.list_checkpoints(tmp_path / f"single{i}")
        cb = checkpoint.list_checkpoints(tmp_path / f"member{i}")
        assert [c.name for c in ca] == [c.name for c in cb] == ["checkpoint_4.pt", "checkpoint_8.pt"]
        a, b = checkpoint.load(ca[-1]), checkpoint.load(cb[-1])
        assert a["model"].keys() == b["model"].keys()
        for name, w in a["model"].items():
            v, keys = b["model"][name].clone(), key_bias(name, w)
            if keys is not None:  # within the 8 updates' learning rates, however the noise fell
                assert (v[keys] - w[keys]).abs().max() < 8 * 1e-3
                v[keys] = w[keys]
            assert torch.allclose(v, w, rtol=0, atol=1e-6), name
        # the optimizer state is a standalone run's: same form, loadable by the Adam a resume builds
        assert b["optimizer"]["param_groups"] == a["optimizer"]["param_groups"]
        assert b["optimizer"]["state"].keys() == a["optimizer"]["state"].keys()
        model = build_model(recipes[i].recipe, read_meta(tiny_root / "tiny_parallel")["vocab_size"], PAD)
        model.load_state_dict(b["model"])
        o = recipes[i].recipe.optim
        load_optimizer_state(make_optimizer(model.parameters(), o.lr, o.betas, o.eps, o.weight_decay), b["optimizer"])
    assert not checkpoint.list_checkpoints(tmp_path / "member2")  # failed before its first checkpoint, as alone


def test_a_language_model_group_equals_its_standalone_runs(tiny_lm_root, tmp_path):
    """The LM's adaptive input and softmax select rows by value; under vmap they compute every band for every token
    and keep each token's own (repro/model/adaptive.py): the same losses as alone."""
    sets = ["model.decoder_layers=2", "optim.max_updates=6", "train.log_interval=1", *NO_DROPOUT,
            "model.adaptive_softmax_dropout=0.0"]
    recipes = [resolve(REPO / "recipes/wikitext103/6L-post_ln.yaml", "tiny", sets + [f"train.seed={s}"]) for s in (1, 2)]
    for i, r in enumerate(recipes):
        train_run(r, tmp_path / f"single{i}", tiny_lm_root)
    train_group(recipes, [tmp_path / f"member{i}" for i in range(2)], tiny_lm_root)
    for i in range(2):
        a, b = log_rows(tmp_path / f"single{i}"), log_rows(tmp_path / f"member{i}")
        assert len(a) == len(b) == 9  # 6 training rows, 3 validations
        for x, y in zip(a, b):
            for key in ("loss", "grad_norm", "valid_nll"):
                if key in x:
                    assert y[key] == pytest.approx(x[key], rel=1e-5), (i, x["step"], key)


def test_a_killed_group_resumes_as_if_it_had_not_been(tiny_root, tmp_path):
    """Killed after update 3's checkpoints, one member having written its update-6 checkpoint before the kill: the
    group goes back to update 3 for all, and ends with the weights and logs of the group that was never stopped
    (dropout on: the group's random state is restored too)."""
    sets = SMALL + ["optim.max_updates=6", "train.save_interval=3", "train.keep_last=5"]
    recipes = [resolve(RECIPE, "tiny", sets + [f"train.seed={s}"]) for s in (1, 2)]
    full = [tmp_path / "full" / f"m{i}" for i in range(2)]
    train_group(recipes, full, tiny_root)
    cut = [tmp_path / "cut" / f"m{i}" for i in range(2)]
    shutil.copytree(tmp_path / "full", tmp_path / "cut")
    for run in cut:
        (run / "status.json").unlink()
    for name in ("checkpoint_6.pt", "checkpoint_6.pt.sha256"):
        (cut[1] / name).unlink()  # member 0 wrote its update-6 checkpoint, member 1 had not
    statuses = train_group(recipes, cut, tiny_root, resume=True)
    assert [s["step"] for s in statuses] == [6, 6]
    assert [(s["from_update"], s["to_update"]) for s in statuses[0]["segments"]] == [(0, 3), (3, 6)]
    for a, b in zip(full, cut):
        x, y = checkpoint.load(a / "checkpoint_6.pt"), checkpoint.load(b / "checkpoint_6.pt")
        assert all(torch.equal(x["model"][k], y["model"][k]) for k in x["model"])
        assert log_rows(a) == log_rows(b)
    # members whose checkpoints do not meet: one line naming the member's folder and what it holds
    apart = [tmp_path / "apart" / f"m{i}" for i in range(2)]
    shutil.copytree(tmp_path / "full", tmp_path / "apart")
    for run, gone in zip(apart, ("checkpoint_3.pt", "checkpoint_6.pt")):
        (run / "status.json").unlink()
        (run / gone).unlink()
    with pytest.raises(RunDirError, match=r"m0: the group's members meet at update 3, but this member holds no "
                                          r"checkpoint of it \(checkpoint_6.pt\)"):
        train_group(recipes, apart, tiny_root, resume=True)


def test_padding_adds_rows_and_columns_that_count_for_nothing():
    a = {"src": torch.tensor([[5, 6, 2]]), "prev": torch.tensor([[2, 7]]), "target": torch.tensor([[7, 2]]),
         "ntokens": 2}
    b = {"src": torch.tensor([[5, 2], [8, 2]]), "prev": torch.tensor([[2, 9, 9], [2, 9, 1]]),
         "target": torch.tensor([[9, 9, 2], [9, 2, 1]]), "ntokens": 5}
    out = pad_rows([a, b], "cpu")
    assert out["src"].shape == (2, 2, 3) and out["prev"].shape == out["target"].shape == (2, 2, 3)
    assert out["src"][0].tolist() == [[5, 6, 2], [2, 1, 1]]  # an added row: one </s>, then padding
    assert out["prev"][0].tolist() == [[2, 7, 1], [2, 1, 1]] and out["target"][0].tolist() == [[7, 2, 1], [1, 1, 1]]
    assert out["src"][1].tolist() == [[5, 2, 1], [8, 2, 1]]


def test_a_group_is_one_recipe_in_one_process(tmp_path):
    base = resolve(RECIPE, "tiny", SMALL)
    check_group([base, resolve(RECIPE, "tiny", SMALL + ["train.seed=2", "optim.lr=0.002"])], 1, False)
    with pytest.raises(ValueError, match="differs from .* in more than train.seed, optim.lr, optim.warmup_updates"):
        check_group([base, resolve(RECIPE, "tiny", SMALL + ["model.dropout=0.2"])], 1, False)
    with pytest.raises(ValueError, match="supports tasks mt, summarization, lm, not asr"):
        check_group([resolve(REPO / "recipes/librispeech/6L-6L-post_ln.yaml", "tiny", [])] * 2, 1, False)
    with pytest.raises(ValueError, match="one process"):
        check_group([base, base], 2, False)


def test_seed_lists_parse_or_say_why():
    assert parse_seeds("1-3") == [1, 2, 3] and parse_seeds("1,3,5") == [1, 3, 5] and parse_seeds("1-2,7") == [1, 2, 7]
    for bad, why in (("a", "'a' is not a seed"), ("3-1", "not an increasing range"), ("1,1", "named twice")):
        with pytest.raises(ValueError, match=why):
            parse_seeds(bad)


def test_train_seeds_writes_one_record_per_seed_and_the_table_reads_them(tiny_root, tmp_path):
    results, runs = tmp_path / "results", tmp_path / "runs"
    common = ["--root", str(tiny_root), "--results", str(results)]
    r = CliRunner().invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--seeds", "1-3",
                                 "--run-dir", str(runs), *common])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in runs.iterdir()) == [f"6L-6L-b2t-tiny-s{s}" for s in (1, 2, 3)]
    records = sorted((results / "tiny/6L-6L-b2t").glob("seed*.json"))
    assert [p.name for p in records if not p.name.endswith(".log.jsonl")] == ["seed1.json", "seed2.json", "seed3.json"]
    rec = json.loads((results / "tiny/6L-6L-b2t/seed2.json").read_text())
    assert rec["status"] == "completed" and rec["seed"] == 2 and rec["group"]["seeds"] == [1, 2, 3]
    csv = CliRunner().invoke(app, ["table", "1", "--scale", "tiny", "--format", "csv", "--results", str(results)])
    row = [l for l in csv.output.splitlines() if l.startswith("1,6L-6L,b2t,Average,")][0]
    assert row.endswith(",tiny,not evaluated,3,0")  # three seeds, none failed (none evaluated yet)
    r = CliRunner().invoke(app, ["evaluate", str(runs / "6L-6L-b2t-tiny-s2"), *common])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--seeds", "1-3",
                                 "--seed", "4", *common])
    assert r.exit_code == 2 and "--seed and --seeds" in r.output
    for flags, why in ((["--print-config"], "--print-config prints one run's recipe"),
                       (["--cuda-graphs"], "grouped training does not replay CUDA graphs")):
        r = CliRunner().invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--seeds", "1-2",
                                     *flags, "--run-dir", str(tmp_path / "other"), *common])
        assert r.exit_code == 2 and why in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_reproduce_groups_a_cells_missing_seeds_when_asked(tiny_root, tmp_path):
    from repro.reproduce import PlannedRun, lane_steps, lanes, plan
    results, runs = tmp_path / "results", tmp_path / "runs"
    planned = plan(1, "tiny", 2, ["6L-6L:b2t", "6L-6L:pre_ln"], results, runs)
    assert [[r.name for r in lane] for lane in lanes(planned, "auto", on_gpu=False)] == \
        [[r.name] for r in planned]  # a CPU: one process per run
    grouped = lanes(planned, "auto", on_gpu=True)
    assert [[r.seed for r in lane] for lane in grouped] == [[1, 2], [1, 2]]
    steps = lane_steps(grouped[0], results, tiny_root)
    assert steps[0][:6] == ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--seeds", "1,2"]
    assert [s[0] for s in steps] == ["train", "evaluate", "evaluate"]
    partial = PlannedRun("6L-6L-b2t", "tiny", 3, runs / "x", state="partial")
    assert [len(lane) for lane in lanes(planned + [partial], "group", on_gpu=False)] == [2, 2, 1]
    with pytest.raises(ValueError, match="--group trains seeds as one model"):
        lanes(planned, "group", on_gpu=True, train_flags=("--cuda-graphs",))
    r = CliRunner().invoke(app, ["reproduce", "1", "--scale", "tiny", "--seeds", "2", "--cells", "6L-6L:b2t", "--group",
                                 "--jobs", "1", "--runs", str(runs), "--results", str(results), "--root",
                                 str(tiny_root)])
    assert r.exit_code == 0, r.output
    assert "grouped: 2 runs train as 1 group of seeds" in r.output
    for seed in (1, 2):
        rec = json.loads((results / f"tiny/6L-6L-b2t/seed{seed}.json").read_text())
        assert rec["group"]["seeds"] == [1, 2] and rec["metrics"]["bleu_average"] >= 0  # trained together, evaluated


def test_a_stop_request_ends_a_run_at_its_next_log_line_or_validation_completed_with_its_reason(tiny_root, tmp_path):
    """A member asked to stop ends at its next log line, completed, with the reason and its last checkpoint, while
    the group trains on; a run alone stops the same way, or at a validation that comes first; a new run in the
    directory drops an old request."""
    from repro.train.loop import STOP_FILE, request_stop
    sets = SMALL + ["optim.max_updates=8", "train.validate_interval=3", "train.save_interval=4"]
    recipes = [resolve(RECIPE, "tiny", sets + ["train.log_interval=2", f"train.seed={s}"]) for s in (1, 2)]
    request_stop(tmp_path / "member1", "its setting is settled")
    ended = []
    group = train_group(recipes, [tmp_path / "member0", tmp_path / "member1"], tiny_root,
                        on_finish=lambda i, status: ended.append((i, status["step"])))
    assert ended == [(1, 2), (0, 8)]
    assert [(s["status"], s["step"], s["reason"]) for s in group] == [
        ("completed", 8, ""), ("completed", 2, "its setting is settled")]
    assert [c.name for c in checkpoint.list_checkpoints(tmp_path / "member1")] == ["checkpoint_2.pt"]
    assert [r["step"] for r in log_rows(tmp_path / "member1") if "valid_nll" in r] == []
    alone = train_run(recipes[0], tmp_path / "member1", tiny_root, overwrite=True)
    assert (alone["status"], alone["step"]) == ("completed", 8) and not (tmp_path / "member1" / STOP_FILE).exists()
    request_stop(tmp_path / "alone", "enough")
    alone = train_run(resolve(RECIPE, "tiny", sets + ["train.log_interval=5"]), tmp_path / "alone", tiny_root)
    assert (alone["status"], alone["step"], alone["reason"]) == ("completed", 3, "enough")


class Killed(BaseException):
    """A kill -9 between two file writes: nothing of the run's own clean-up runs (not an Exception)."""


@pytest.mark.slow
def test_a_group_killed_before_any_write_around_a_members_end_resumes_bit_for_bit(tiny_root, tmp_path, monkeypatch):
    """A member ends at a stop request between two checkpoints. Killed before each of the run's checkpoint and status
    writes in turn (its own stop checkpoint, the others' checkpoints at its end, its status, every later one), the
    group resumes to the weights, logs and statuses of the group that was never killed."""
    from repro.train import loop
    from repro.train.loop import request_stop
    sets = SMALL + ["optim.max_updates=6", "train.save_interval=2", "train.log_interval=3",
                    "train.validate_interval=100", "train.keep_last=1", "eval.average_last=1"]
    recipes = [resolve(RECIPE, "tiny", sets + [f"train.seed={s}"]) for s in (1, 2, 3)]

    def run(name: str, kill_at: int | None = None) -> tuple[list[Path], int]:
        dirs = [tmp_path / name / f"m{i}" for i in range(3)]
        request_stop(dirs[1], "settled")
        writes = 0
        save, write_text = checkpoint.save, loop.atomic_write_text

        def counted(real):
            def write(*args, **kwargs):
                nonlocal writes
                writes += 1
                if writes == kill_at:
                    raise Killed
                return real(*args, **kwargs)
            return write
        monkeypatch.setattr(checkpoint, "save", counted(save))
        monkeypatch.setattr(loop, "atomic_write_text", counted(write_text))
        try:
            train_group(recipes, dirs, tiny_root)
        except Killed:
            monkeypatch.setattr(checkpoint, "save", save)
            monkeypatch.setattr(loop, "atomic_write_text", write_text)
            train_group(recipes, dirs, tiny_root, resume=True)
        monkeypatch.setattr(checkpoint, "save", save)
        monkeypatch.setattr(loop, "atomic_write_text", write_text)
        return dirs, writes

    full, writes = run("full")
    assert writes >= 12  # 3 at update 2; the stop's, the others' at its end (3) and its status; 4 and 6; 2 statuses
    ends = [json.loads((m / "status.json").read_text()) for m in full]
    assert [(s["status"], s["step"], s["reason"]) for s in ends] == [("completed", 6, ""), ("completed", 3, "settled"),
                                                                     ("completed", 6, "")]
    for k in range(1, writes + 1):
        cut, _ = run(f"kill{k}", kill_at=k)
        for a, b in zip(full, cut):
            x = checkpoint.load(checkpoint.list_checkpoints(a)[-1])
            y = checkpoint.load(checkpoint.list_checkpoints(b)[-1])
            assert x["step"] == y["step"] and all(torch.equal(x["model"][n], y["model"][n]) for n in x["model"]), (k, b)
            assert log_rows(a) == log_rows(b), k
            ends = [json.loads((m / "status.json").read_text()) for m in (a, b)]
            assert [(e["status"], e["step"], e["reason"]) for e in ends][0] == [(e["status"], e["step"], e["reason"])
                                                                               for e in ends][1], k
