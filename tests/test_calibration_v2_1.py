"""Calibration v2.1 (2026-12-03) at its edges: v1 kept where it served and no v2 run exists, grids with runs
finished as v2 states them, tokens x1 first elsewhere (x4 only when no x1 setting serves), and the judging rules'
gate on evaluated calibration runs."""

import json
from pathlib import Path

from repro import calibration, calibration_v2_1
from repro.calibration_v2_1 import RULES_V2_1, choose, settings_to_train

from test_calibration import UNIGRAM, grid, plateau, spec

REPO = Path(__file__).resolve().parents[1]
OK = ("completed", "", plateau(6, 3.0, 2000))


def spec21(task="asr", factors=(1, 4)):
    return spec(rules="v2", deep_pre_ln="deep", warmup_updates=(400, 1000), lr=(5e-4, 1e-3), tokens_factor=factors,
                task=task, path=REPO / "recipes/calibration/v2/librispeech.yaml")


def x1(nll=(3.0, 3.0)):
    return grid({st: nll for st in spec21().settings() if st[2] == 1})


def test_a_task_whose_v1_regime_served_and_has_no_v2_run_keeps_it(monkeypatch):
    s = spec21(task="mt")
    monkeypatch.setattr(calibration_v2_1, "v1_regime", lambda spec: {"warmup_updates": 2000, "lr": 1e-3,
                                                                      "tokens_factor": 1, "max_updates": 8000})
    d = choose(s, {}, UNIGRAM, {}, (True, "a 3 of 3 seeds, b 3 of 3 seeds, deep 1 of 1 seeds"))
    assert d["choice"] == {"warmup_updates": 2000, "lr": 1e-3, "tokens_factor": 1, "max_updates": 8000}
    assert d["kept_v1"].startswith("both baselines and the deepest Pre-LN learned under the v1 regime")
    assert d["rules"] == RULES_V2_1 and settings_to_train(s, d) == []
    assert calibration_v2_1.outcome(s, d).startswith("kept v1 (calibration v2.1): warmup 2,000")
    # where one of them did not learn under v1, the grid runs, x1 first
    d = choose(s, {}, UNIGRAM, {}, (False, "a 0 of 3 seeds"))
    assert not d.get("kept_v1") and d["stage"] == "tokens x1" and len(d["incomplete"]) == 4
    assert settings_to_train(s, d) == [st for st in s.settings() if st[2] == 1]


def test_a_grid_with_runs_on_the_rules_date_is_finished_as_v2_states_it():
    for task in ("lm", "summarization"):
        s = spec21(task=task)
        runs = x1()
        assert choose(s, runs, UNIGRAM, {}, (True, "")) == calibration.choose(s, runs, UNIGRAM, {})
        assert calibration_v2_1.outcome(s, choose(s, runs, UNIGRAM, {}, (True, ""))).endswith("(calibration v2)")
        assert settings_to_train(s, choose(s, runs, UNIGRAM, {}, (True, ""))) == s.settings()


def test_x1_first_and_x4_only_when_no_x1_setting_serves():
    s = spec21()
    runs = x1()
    d = choose(s, runs, UNIGRAM, {st: OK for st in runs}, (False, ""))
    assert d["choice"]["tokens_factor"] == 1 and d["stage"] == "tokens x1"  # the x4 settings never run
    assert calibration_v2_1.outcome(s, d).endswith("updates (calibration v2.1)")  # the version that chose
    d = choose(s, runs, UNIGRAM, {}, (False, ""))
    assert d["deep_needed"]["tokens_factor"] == 1 and settings_to_train(s, d)[-1][2] == 1
    bad = {st: ("failed", "loss exploded", []) for st in runs}
    d = choose(s, runs, UNIGRAM, bad, (False, ""))  # no x1 candidate at which the deep Pre-LN learns
    assert d["stage"].startswith("tokens x4") and len(d["incomplete"]) == 4
    assert settings_to_train(s, d) == s.settings()
    post_never = x1((5.45, 3.0))  # Post-LN learns nothing at x1: the x4 settings run
    d = choose(s, post_never, UNIGRAM, {}, (False, ""))
    assert d["stage"].startswith("tokens x4") and "no setting of the grid lets both baselines learn" in d["stage"]


def test_the_gate_is_the_judging_rules_on_an_evaluated_run(tmp_path, monkeypatch):
    """A speech Post-LN whose validation NLL lies well under the unigram model's but whose WER is worse than one
    constant sentence has failed under v2.1; v2's gate alone would call it learned."""
    s = spec21()
    out = tmp_path / "out"
    out.mkdir()
    refs = {"constant": {"metric": "wer", "output": "a dog in a car", "splits": {"test": 82.7}},
            "unigram": {"valid_nll": 5.1}}
    for st in s.settings():
        if st[2] != 1:
            continue
        for b in s.baselines:
            base = calibration.label(b, st)
            wer = 95.0 if b == "a" else 30.0
            (out / f"{base}.json").write_text(json.dumps({"status": "completed", "reason": "", "task": "asr",
                                                           "metrics": {"valid_nll": 3.0, "splits": {"test": {
                                                               "wer": wer}}}}))
            (out / f"{base}.log.jsonl").write_text("".join(json.dumps({"step": u, "valid_nll": v}) + "\n"
                                                           for u, v in plateau(6, 3.0, 2000)))
    runs, _ = calibration_v2_1.judged_runs(s, out, refs)
    st = (400, 5e-4, 1)
    assert runs[st]["a"][0] == "failed" and "constant output" in runs[st]["a"][1]
    assert runs[st]["b"][0] == "completed"
    d = choose(s, runs, UNIGRAM, {}, (False, ""))
    assert d["stage"].startswith("tokens x4")  # no x1 setting has both baselines learning
    # the curves show the runs as the rule judged them, under the rule's name and outcome
    drawn, plot = {}, calibration.plot
    monkeypatch.setattr(calibration_v2_1, "collected", lambda *a: (runs, {}))
    monkeypatch.setattr(calibration, "unigram_nll_of", lambda *a: UNIGRAM)
    monkeypatch.setattr(calibration, "plot", lambda *a: (drawn.update(runs=a[1], headline=a[6]), plot(*a)))
    assert calibration_v2_1.decide(s, out, tmp_path).get("incomplete")
    assert drawn["runs"][st]["a"][0] == "failed" and (out / "curves.png").stat().st_size > 0
    assert drawn["headline"].startswith(RULES_V2_1) and "tokens x4" in drawn["headline"]
    assert not (out / "choice.json").exists()


def test_an_evaluated_calibration_runs_job_evaluates_it_and_its_record_keeps_the_metrics(tmp_path):
    s = spec21()
    job = calibration.train_job(s, "librispeech/6L-6L-post_ln", (1000, 5e-4, 1), tmp_path, tmp_path / "data",
                                evaluate=True)
    assert [step[0] for step in job.steps] == ["train", "evaluate"]
    run = tmp_path / calibration.label("librispeech/6L-6L-post_ln", (1000, 5e-4, 1))
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"status": "completed", "reason": "", "recipe": "r", "recipe_hash":
                                                 "h", "started": "t", "step": 10}))
    (run / "log.jsonl").write_text(json.dumps({"step": 10, "valid_nll": 3.0}) + "\n")
    (run / "metrics.json").write_text(json.dumps({"valid_nll": 3.0}))
    calibration.collect_runs([(run.name, {"task": "asr"})], tmp_path, tmp_path / "out")
    assert json.loads((tmp_path / "out" / f"{run.name}.json").read_text())["metrics"] == {"valid_nll": 3.0}
