"""The mini-regime calibration: the rule at its edges, and the whole grid on tiny data through real processes."""

import json
from pathlib import Path

import pytest
import torch

from repro import calibration, calibration_v1
from repro.calibration import CalibrationSpec, converged, setting_length
from repro.calibration_v1 import choose
from repro.config import RecipeError, resolve
from repro.results import RecordError

REPO = Path(__file__).resolve().parents[1]


def spec(**kw):
    base = dict(path=Path("recipes/calibration/x.yaml"), task="mt", scale="mini", baselines=("a", "b"),
                warmup_updates=(400, 1000), lr=(1e-3,), max_updates=5000, validate_interval=500,
                window_fraction=0.2, tolerance=0.01)
    base.update(kw)
    return CalibrationSpec(**base)


def plateau(start: float, floor: float, until: int, cap: int = 5000, every: int = 500):
    """Falls linearly from `start` to `floor` at update `until`, flat after."""
    return [(s, floor if s >= until else start - (start - floor) * s / until) for s in range(every, cap + 1, every)]


def test_converged_edges():
    curve = [(1000, 5.0), (2000, 4.0), (3000, 3.99), (4000, 3.985), (5000, 3.98)]
    assert converged(curve, 5000, 0.2, 0.01)        # 3.985 -> 3.98 over the last fifth: under 1%
    assert not converged(curve, 2000, 0.2, 0.01)    # 5.0 -> 4.0
    assert not converged([(500, 3.0)], 500, 0.2, 0.01)  # nothing before the window: cannot tell
    rising = [(1000, 4.0), (2000, 3.0), (3000, 3.5), (4000, 3.8)]
    assert converged(rising, 4000, 0.2, 0.01)       # best stopped improving (over-fitting counts as a plateau)


def test_length_is_first_point_after_warmup_where_both_converged():
    s = spec()
    a, b = plateau(6, 3, 2000), plateau(6, 3.2, 3500)
    assert setting_length([a, b], 400, s) == 4500   # b flat from 3500; its last fifth at 4500 starts at 3600
    assert setting_length([a, plateau(6, 3, 9999)], 400, s) is None


def test_choice_lowest_mean_best_nll_failed_and_unconverged_excluded():
    s = spec(warmup_updates=(400, 1000, 2000))
    curves = {(400, 1e-3): {"a": plateau(6, 3.5, 1500), "b": plateau(6, 3.4, 1500)},
              (1000, 1e-3): {"a": plateau(6, 3.1, 2500), "b": plateau(6, 3.0, 2500)},
              (2000, 1e-3): {"a": plateau(6, 2.0, 9999), "b": plateau(6, 2.0, 2500)}}  # never converges: out
    d = choose(s, curves, {})
    assert d["choice"] == {"warmup_updates": 1000, "lr": 1e-3, "max_updates": 3500}
    assert d["settings"][2]["excluded"].startswith("not converged")
    d = choose(s, curves, {(1000, 1e-3): ["a (loss became nan)"]})
    assert d["choice"]["warmup_updates"] == 400 and d["settings"][1]["excluded"].startswith("failed")
    assert choose(s, {}, {})["choice"] is None


def test_no_choice_until_every_setting_has_run():
    """A grid stopped part-way chooses nothing, not even provisionally, whatever the settings that did finish show."""
    s = spec(warmup_updates=(400, 1000, 2000))
    done = {(400, 1e-3): {"a": plateau(6, 3.5, 1500), "b": plateau(6, 3.4, 1500)}}
    d = choose(s, done, {})
    assert d["choice"] is None and d["provisional"] is None
    assert d["incomplete"] == [{"warmup_updates": 1000, "lr": 1e-3}, {"warmup_updates": 2000, "lr": 1e-3}]
    assert d["settings"][0]["length"] == 2000 and d["settings"][1]["excluded"] == "not run"
    flat = {"a": plateau(6, 3.0, 9999), "b": plateau(6, 3.0, 9999)}
    half = {**done, (1000, 1e-3): {"a": flat["a"]}, (2000, 1e-3): flat}
    assert choose(s, half, {})["incomplete"] == [{"warmup_updates": 1000, "lr": 1e-3}]  # one baseline missing
    assert choose(s, {(400, 1e-3): flat}, {})["provisional"] is None  # none converged, yet no provisional
    whole = {**half, (1000, 1e-3): flat}
    assert "incomplete" not in choose(s, whole, {}) and choose(s, whole, {})["choice"]["warmup_updates"] == 400


def test_spec_errors_are_one_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("task: mt\n")
    with pytest.raises(RecipeError, match="scale: missing"):
        calibration.load_spec(p)
    text = (REPO / "recipes/calibration/mt.yaml").read_text()
    p.write_text(text.replace("warmup_updates: [400, 1000, 2000]", "warmup_updates: [400, 9000]"))
    with pytest.raises(RecipeError, match=r"warmup_updates: \[400, 9000\] must lie in \[1, max_updates\)"):
        calibration.load_spec(p)
    for task in ("mt", "gigaword", "wikitext103", "librispeech"):
        s = calibration.load_spec(REPO / f"recipes/calibration/{task}.yaml")
        assert set(s.warmup_updates) >= {400, 1000, 2000} and s.lr == (1e-3,)
        assert all("b2t" not in b and ("post_ln" in b or "pre_ln" in b) for b in s.baselines)


def test_calibration_grid_on_tiny_data(tiny_root, tmp_path):
    """Four real runs (two baselines x two warmups) in two processes at once, then the records and the decision."""
    recipes = tmp_path / "recipes"
    (recipes / "calibration").mkdir(parents=True)
    (recipes / "base").symlink_to(REPO / "recipes/base")
    for name in ("6L-6L-post_ln", "6L-6L-pre_ln"):
        (recipes / f"{name}.yaml").symlink_to(REPO / f"recipes/{name}.yaml")
    path = recipes / "calibration/tiny.yaml"
    path.write_text("task: mt\nscale: tiny\nbaselines: [6L-6L-post_ln, 6L-6L-pre_ln]\nwarmup_updates: [2, 4]\n"
                    "lr: [0.001]\nmax_updates: 12\nvalidate_interval: 2\nwindow_fraction: 0.2\ntolerance: 0.5\n")
    s = calibration.load_spec(path)
    from repro.launch import run_jobs
    jobs = calibration_v1.jobs(s, tmp_path / "runs", tiny_root)
    assert len(jobs) == 4
    out = tmp_path / "results/tiny/calibration/mt"
    kept = []  # (run, records in place) as each run ends, collected as `calibrate` does
    done = run_jobs(jobs, parallel=2, threads=1, poll_s=0.2, on_finish=lambda job: (
        calibration_v1.collect(s, tmp_path / "runs", out), kept.append((job.name, {p.stem for p in out.glob("*.json")}))))
    assert [j.state for j in done] == ["done"] * 4, [j.log.read_text()[-500:] for j in done]
    assert len(kept) == 4 and all(name in records for name, records in kept)
    assert calibration_v1.jobs(s, tmp_path / "runs", tiny_root) == []  # finished runs are not run again

    # Deciding on the first setting alone draws its curves and chooses nothing.
    part = tmp_path / "part"
    part.mkdir()
    for p in out.glob("*-w2-*"):
        (part / p.name).write_bytes(p.read_bytes())
    d = calibration_v1.decide(s, part, part / "curves.png")
    assert d["incomplete"] == [{"warmup_updates": 4, "lr": 1e-3}] and d["choice"] is None
    assert (part / "curves.png").stat().st_size > 0 and not (part / "choice.json").exists()

    calibration_v1.collect(s, tmp_path / "runs", out)
    record = json.loads((out / "6L-6L-post_ln-w2-lr0.001.json").read_text())
    assert record["status"] == "completed" and record["warmup_updates"] == 2 and record["commit"]
    assert "optim.warmup_updates=2" in record["overrides"] and record["hardware"]["device"]
    assert record["data"]["corpus"] and len(record["data"]["files_sha256"]) == 16
    decision = calibration_v1.decide(s, out, out / "curves.png")
    assert (out / "curves.png").stat().st_size > 0 and (out / "choice.json").is_file()
    assert {r["warmup_updates"] for r in decision["settings"]} == {2, 4}
    assert not list((tmp_path / "results").rglob("seed*.json"))  # the grid never writes a table record

    # Applying the choice edits the recipes; collecting and deciding again must leave every file as it was,
    # the records naming the recipe hash that trained (and keeping a note added to one), the choice keeping when
    # and where it was made.
    choice = json.loads((out / "choice.json").read_text())
    choice["decided"] = "2000-01-01T00:00:00+00:00"
    (out / "choice.json").write_text(json.dumps(choice, indent=2) + "\n")
    noted = json.loads((out / "6L-6L-pre_ln-w2-lr0.001.json").read_text()) | {"note": "a reader's remark"}
    (out / "6L-6L-pre_ln-w2-lr0.001.json").write_text(json.dumps(noted, indent=2, sort_keys=True) + "\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (recipes / "6L-6L-post_ln.yaml").unlink()
    (recipes / "6L-6L-post_ln.yaml").write_text((REPO / "recipes/6L-6L-post_ln.yaml").read_text()
                                                 + "optim: {label_smoothing: 0.2}\n")
    now_hash = resolve(recipes / "6L-6L-post_ln.yaml", "tiny", calibration.base_overrides(s, 2, 1e-3)).hash()
    assert now_hash != record["recipe_hash"]
    calibration_v1.collect(s, tmp_path / "runs", out)
    calibration_v1.decide(s, out, out / "curves.png")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # A record of another recipe hash in a record's place is refused, not overwritten.
    record["recipe_hash"] = "0123456789ab"
    (out / "6L-6L-post_ln-w2-lr0.001.json").write_text(json.dumps(record))
    with pytest.raises(RecordError, match="holds a run of recipe hash 0123456789ab"):
        calibration_v1.collect(s, tmp_path / "runs", out)


@pytest.mark.parametrize("task", ["mt", "gigaword", "wikitext103", "librispeech"])
def test_mini_recipes_use_the_recorded_regime(task):
    """Every variant and depth of a calibrated task trains with the recorded regime, v2's where it has chosen, else
    v1's (T-Fixup: its own lr, no warmup); every mini recipe's update is one batch times v2's tokens factor."""
    choices = [REPO / f"results/mini/calibration/{v}{task}/choice.json" for v in ("v2/", "")]
    decisions = [json.loads(p.read_text()) for p in choices if p.is_file()]
    decisions = [d for d in decisions if d.get("choice") or d.get("provisional")]
    if not decisions:
        pytest.skip(f"{task}: not calibrated yet")
    regime = calibration.regime(decisions[0])
    folder = {"mt": "", "gigaword": "gigaword/", "wikitext103": "wikitext103/", "librispeech": "librispeech/"}[task]
    paths = [p for p in (REPO / "recipes" / folder).glob("*.yaml")]
    assert paths
    for path in paths:
        o = resolve(path, "mini").recipe.optim
        assert (o.warmup_updates, o.max_updates) == (regime["warmup_updates"], regime["max_updates"]), path
        assert o.gpus_per_update == regime["tokens_factor"], path
        if "t_fixup" not in path.name:
            assert o.lr == regime["lr"], path


def test_calibrate_decides_from_committed_records_and_states_a_grids_cost(tmp_path, monkeypatch):
    """With every record of the grid committed, `calibrate TASK` decides from them and trains nothing; before
    training it says what the runs cost at the paces the records kept: on this machine where they price it, else on
    the fastest machine that does."""
    import json
    import shutil
    from pathlib import Path
    from typer.testing import CliRunner
    import repro.provenance
    from repro import calibration, pace
    from repro.cli import app
    repo = Path(__file__).resolve().parents[1]
    results = tmp_path / "results"
    shutil.copytree(repo / "results/mini/calibration/mt", results / "mini/calibration/mt")
    monkeypatch.chdir(repo)  # the specs live in recipes/calibration/
    r = CliRunner().invoke(app, ["calibrate", "mt", "--rules", "v1", "--results", str(results), "--runs",
                                 str(tmp_path / "runs")])
    assert r.exit_code == 0, r.output
    assert "deciding from the 6 committed calibration records" in r.output and not (tmp_path / "runs").exists()
    spec = calibration.load_spec(repo / "recipes/calibration/mt.yaml")
    runs = calibration.job_runs(spec, calibration_v1.jobs(spec, tmp_path / "runs", tmp_path / "data"))
    assert len(runs) == 6
    # the grid again: its six H100 runs took as long as the records say, the same lengths at the same batches
    records = [json.loads(p.read_text()) for p in (results / "mini/calibration/mt").glob("*-lr*.json")]
    hours = sum(r["duration_s"] for r in records) / 3600
    h100 = records[0]["hardware"]
    monkeypatch.setattr(repro.provenance, "hardware", lambda: {**h100, "threads": 4})
    here = pace.grid_cost("mini", runs, results, 4, 3)
    assert here.startswith(f"about {hours:.1f} h of training on this machine (1 x H100), ")
    assert f"{hours / 3:.1f} h of wall time 3 at once" in here  # six equal runs, two rounds of three
    cpu = {"device": "cpu", "cpu": "Acme Chip", "cpu_id": "family 1 model 2", "cpu_count": 2, "gpus": 0}
    monkeypatch.setattr(repro.provenance, "hardware", lambda: cpu)
    assert pace.grid_cost("mini", runs, results, 1, 2) == (
        f"no record prices them on this machine (Acme Chip 1/2, 1 thread); on 1 x H100, about {hours:.1f} h of "
        "training")
    assert pace.grid_cost("mini", runs, tmp_path / "none", 1, 2).startswith("no record keeps a pace")
    # v2: a tokens-x4 run makes four of its recipe's batches an update, to the cap at most; a grouped job is not a run
    v2 = calibration.load_spec(repo / "recipes/calibration/v2/mt.yaml")
    todo = calibration.jobs(v2, "mt", tmp_path / "runs", tmp_path / "data", False, tmp_path / "none", results)
    per_update = {1: v2.max_updates, 4: 4 * v2.max_updates}
    assert sorted(b for _, b in calibration.job_runs(v2, todo)) == sorted(per_update[k] for _, _, k in
                                                                          v2.settings() for _ in v2.baselines)
    assert calibration.job_runs(v2, calibration.jobs(v2, "mt", tmp_path / "runs", tmp_path / "data", True,
                                                        tmp_path / "none", results)) is None


# -- calibration v2 (2026-11-29) ---------------------------------------------------------------------------------

def spec_v2(**kw):
    return spec(rules="v2", deep_pre_ln="deep", warmup_updates=(400, 1000), lr=(5e-4, 1e-3), tokens_factor=(1,), **kw)


def grid(nll: dict) -> dict:
    """Baseline runs that plateau at the given (a, b) validation NLL per setting, all completed."""
    return {k: {"a": ("completed", "", plateau(6, va, 2000)), "b": ("completed", "", plateau(6, vb, 2000))}
            for k, (va, vb) in nll.items()}


UNIGRAM = 5.5  # learned: best validation NLL at most 5.4


def test_v2_chooses_the_least_worst_regret_not_the_least_mean():
    """(400, 5e-4): a 3.0, b 4.0 (mean 3.5, regret 0.8: b is 0.8 from its best); (1000, 5e-4): a 3.5, b 3.2
    (mean 3.35, regret 0.5); (400, 1e-3): a 3.6, b 3.3 (regret 0.6); (1000, 1e-3): a 3.9, b 3.25 (regret 0.9)."""
    s = spec_v2()
    runs = grid({(400, 5e-4, 1): (3.0, 4.0), (1000, 5e-4, 1): (3.5, 3.2), (400, 1e-3, 1): (3.6, 3.3),
                 (1000, 1e-3, 1): (3.9, 3.25)})
    ok = ("completed", "", plateau(6, 3.0, 2000))
    d = calibration.choose(s, runs, UNIGRAM, {k: ok for k in runs})
    assert d["choice"] == {"warmup_updates": 1000, "lr": 5e-4, "tokens_factor": 1, "max_updates": 2500}
    regrets = {(r["warmup_updates"], r["lr"]): round(r["regret"], 6) for r in d["settings"]}
    assert regrets == {(400, 5e-4): 0.8, (1000, 5e-4): 0.5, (400, 1e-3): 0.6, (1000, 1e-3): 0.9}
    assert d["rules"].startswith("calibration v2 of 2026-11-29")


def test_v2_a_baseline_that_learned_nothing_or_failed_rules_its_setting_out():
    s = spec_v2()
    runs = grid({(400, 5e-4, 1): (5.45, 3.0), (1000, 5e-4, 1): (3.5, 3.2), (400, 1e-3, 1): (3.0, 3.1),
                 (1000, 1e-3, 1): (3.4, 3.4)})
    runs[(400, 1e-3, 1)]["b"] = ("failed", "loss exploded", plateau(6, 3.1, 2000))
    ok = ("completed", "", plateau(6, 3.0, 2000))
    d = calibration.choose(s, runs, UNIGRAM, {k: ok for k in runs})
    rows = {(r["warmup_updates"], r["lr"]): r for r in d["settings"]}
    assert rows[(400, 5e-4)]["excluded"].startswith("a learned nothing: best validation NLL 5.450")  # 5.45 > 5.4
    assert rows[(400, 1e-3)]["excluded"] == "b failed: loss exploded"
    assert d["choice"]["warmup_updates"] == 1000 and d["choice"]["lr"] == 5e-4  # regret 0.1 against (1000, 1e-3)'s 0.2


def test_v2_the_deepest_pre_ln_must_learn_too_and_is_run_in_order():
    s = spec_v2()
    runs = grid({(400, 5e-4, 1): (3.0, 3.0), (1000, 5e-4, 1): (3.1, 3.1), (400, 1e-3, 1): (3.2, 3.2),
                 (1000, 1e-3, 1): (3.3, 3.3)})
    d = calibration.choose(s, runs, UNIGRAM, {})
    assert d["choice"] is None and d["deep_needed"] == {"warmup_updates": 400, "lr": 5e-4, "tokens_factor": 1,
                                                        "max_updates": 2500}
    deep = {(400, 5e-4, 1): ("failed", "validation NLL diverged", []),
            (1000, 5e-4, 1): ("completed", "", plateau(6, 5.45, 2000))}  # learned nothing
    d = calibration.choose(s, runs, UNIGRAM, deep)
    assert d["deep_needed"]["warmup_updates"] == 400 and d["deep_needed"]["lr"] == 1e-3
    deep[(400, 1e-3, 1)] = ("completed", "", plateau(6, 4.0, 2000))
    d = calibration.choose(s, runs, UNIGRAM, deep)
    assert d["choice"]["lr"] == 1e-3 and d["choice"]["warmup_updates"] == 400
    rows = {(r["warmup_updates"], r["lr"]): r for r in d["settings"]}
    assert rows[(400, 5e-4)]["excluded"] == "deep failed: validation NLL diverged"
    assert rows[(1000, 5e-4)]["deep_pre_ln"].startswith("learned nothing")


def test_v2_a_task_no_setting_serves_is_not_informative_and_an_incomplete_grid_decides_nothing():
    s = spec_v2()
    runs = grid({k: (5.45, 3.0) for k in s.settings()})  # Post-LN never learns
    d = calibration.choose(s, runs, UNIGRAM, {})
    assert d["choice"] is None and d["not_informative"] == "no setting of the grid lets both baselines learn"
    ok = grid({k: (3.0, 3.0) for k in s.settings()})
    bad_deep = {k: ("failed", "loss exploded", []) for k in s.settings()}
    d = calibration.choose(s, ok, UNIGRAM, bad_deep)
    assert d["not_informative"] == "at no setting where both baselines learn does deep learn too"
    del ok[(1000, 1e-3, 1)]
    d = calibration.choose(s, ok, UNIGRAM, bad_deep)
    assert d["choice"] is None and d["not_informative"] is None and len(d["incomplete"]) == 1
    # a setting one baseline has run shows that run's best, and which run it waits for; still nothing is decided
    half = grid({k: (3.0, 3.0) for k in s.settings()})
    del half[(1000, 1e-3, 1)][s.baselines[1]]
    d = calibration.choose(s, half, UNIGRAM, bad_deep)
    row = next(r for r in d["settings"] if (r["warmup_updates"], r["lr"], r["tokens_factor"]) == (1000, 1e-3, 1))
    assert row["best_valid_nll"] == {s.baselines[0]: pytest.approx(3.0, abs=0.2)}
    assert row["excluded"] == f"not run: {s.baselines[1]}" and d["choice"] is None and len(d["incomplete"]) == 1


@pytest.mark.parametrize("task", ["mt", "gigaword", "librispeech", "wikitext103"])
def test_v2_specs_name_real_recipes_and_the_full_grid(task):
    s = calibration.load_spec(REPO / "recipes/calibration/v2" / f"{task}.yaml")
    assert s.rules == "v2" and s.lr == (5e-4, 1e-3) and s.warmup_updates == (1000, 4000) and s.tokens_factor == (1, 4)
    assert len(s.settings()) == 8
    for name in (*s.baselines, s.deep_pre_ln):
        assert resolve(REPO / "recipes" / f"{name}.yaml", "mini").recipe.model.variant == name.rsplit("-", 1)[1]
    assert "pre_ln" in s.deep_pre_ln and s.baselines[0].endswith("post_ln") and s.baselines[1].endswith("pre_ln")


def test_calibration_v2_grid_on_tiny_data(tiny_root, tmp_path, monkeypatch):
    """`lnrepro calibrate mt` with a tiny v2 spec: each baseline's two learning rates at each tokens factor trained
    as one group, every record collected, then the rule, which asks for the deepest Pre-LN run where it needs it."""
    from typer.testing import CliRunner

    from repro.cli import app
    recipes = tmp_path / "recipes"
    (recipes / "calibration/v2").mkdir(parents=True)
    (recipes / "base").symlink_to(REPO / "recipes/base")
    for name in ("6L-6L-post_ln", "6L-6L-pre_ln", "12L-12L-pre_ln"):
        (recipes / f"{name}.yaml").symlink_to(REPO / f"recipes/{name}.yaml")
    (recipes / "calibration/v2/mt.yaml").write_text(
        "rules: v2\ntask: mt\nscale: tiny\nbaselines: [6L-6L-post_ln, 6L-6L-pre_ln]\ndeep_pre_ln: 12L-12L-pre_ln\n"
        "warmup_updates: [2]\nlr: [0.0005, 0.001]\ntokens_factor: [1, 2]\nmax_updates: 12\nvalidate_interval: 2\n"
        "window_fraction: 0.2\ntolerance: 0.5\n")
    monkeypatch.chdir(tmp_path)
    results, runner = tmp_path / "results", CliRunner()
    r = runner.invoke(app, ["references", "recipes/6L-6L-post_ln.yaml", "--scale", "tiny", "--root", str(tiny_root),
                            "--results", str(results)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["calibrate", "mt", "--group", "--jobs", "2", "--threads", "1", "--root", str(tiny_root),
                            "--results", str(results), "--runs", str(tmp_path / "runs")])
    assert r.exit_code == 0, r.output
    # calibration v2.1: no v1 record here, so the grid runs its tokens-x1 settings first, each run evaluated
    assert "2 calibration job(s) to run (grouped): 6L-6L-post_ln-x1-group, 6L-6L-pre_ln-x1-group" in r.output
    out = results / "tiny/calibration/v2/mt"
    baseline = sorted(p.name for p in out.glob("6L-6L-*.json"))
    x1 = sorted(f"6L-6L-{v}-w2-lr{lr}.json" for v in ("post_ln", "pre_ln") for lr in ("0.0005", "0.001"))
    d = json.loads((out / "choice.json").read_text())
    assert baseline[:4] == x1 or sorted(set(baseline) - set(x1)) == sorted(
        f"6L-6L-{v}-w2-lr{lr}-x2.json" for v in ("post_ln", "pre_ln") for lr in ("0.0005", "0.001"))
    assert len(baseline) == 4 or d.get("stage", "").startswith("tokens x4")  # x2 only where no x1 setting served
    rec = json.loads((out / "6L-6L-pre_ln-w2-lr0.001.json").read_text())
    assert rec["tokens_factor"] == 1 and rec["group"]["runs"][0].endswith("6L-6L-pre_ln-w2-lr0.0005")
    assert rec["rules"].startswith("calibration v2")
    x1_records = [json.loads((out / name).read_text()) for name in x1]
    assert all("metrics" in r for r in x1_records if r["status"] == "completed")  # evaluated as they ended
    assert (d["choice"] is None) != (d["not_informative"] is None) and d["deep_needed"] is None
    if d["choice"]:  # the deepest Pre-LN ran at the choice, to its length
        c = d["choice"]
        deep = calibration.label("12L-12L-pre_ln", (c["warmup_updates"], c["lr"], c["tokens_factor"]))
        assert f"optim.max_updates={c['max_updates']}" in json.loads((out / f"{deep}.json").read_text())["overrides"]
    assert (out / "curves.png").stat().st_size > 0
    r = runner.invoke(app, ["calibrate", "mt", "--decide-only", "--results", str(results)])
    assert r.exit_code == 0 and ("choice:" in r.output or "not informative at tiny" in r.output), r.output


def test_v2_runs_every_baseline_at_a_tokens_factor_before_the_next_factor(tmp_path):
    """The x1 settings complete, both baselines, before the four-times-costlier x4 runs start."""
    s = calibration.load_spec(REPO / "recipes/calibration/v2/gigaword.yaml")
    (tmp_path / calibration.label(s.baselines[0], s.settings()[0])).mkdir()
    (tmp_path / calibration.label(s.baselines[0], s.settings()[0]) / "status.json").write_text(
        '{"status": "completed"}')
    names = [j.name for j in calibration.jobs(s, "gigaword", tmp_path, tmp_path, False, tmp_path / "out",
                                                 tmp_path)]
    factors = [2 if n.endswith("-x4") else 1 for n in names]
    assert len(names) == 15 and factors == sorted(factors)
    assert {n.split("-w")[0] for n in names[:7]} == {"gigaword-6L-6L-post_ln", "gigaword-6L-6L-pre_ln"}


def test_v2_a_grid_split_by_tokens_factor_trains_that_factor_alone_and_passes_its_flags(tmp_path):
    """`calibrate TASK --tokens-factor 1 --cuda-graphs`: the x1 runs alone, each a `train --cuda-graphs` job."""
    s = calibration.load_spec(REPO / "recipes/calibration/v2/gigaword.yaml")
    x1 = [st for st in s.settings() if st[2] == 1]
    jobs = calibration.jobs(s, "gigaword", tmp_path, tmp_path, False, tmp_path / "out", tmp_path, x1,
                               ["--cuda-graphs"])
    assert len(jobs) == 8 and not any(j.name.endswith("-x4") for j in jobs)
    assert all(j.steps[0][0] == "train" and "--cuda-graphs" in j.steps[0] for j in jobs)
    assert all("--cuda-graphs" not in j.steps[0]
               for j in calibration.jobs(s, "gigaword", tmp_path, tmp_path, False, tmp_path / "out", tmp_path))


@pytest.mark.parametrize("grouped", [False, True])
def test_v2_one_setting_trains_its_two_baselines_alone_grouped_or_not(tmp_path, grouped):
    """`calibrate TASK --setting w1000-lr0.0005-x4`: that setting's two runs, one `train` job each, even where the
    grid would be grouped (a group trains every unmade setting of its factor)."""
    s = calibration.load_spec(REPO / "recipes/calibration/v2/gigaword.yaml")
    st = calibration.parse_setting(s, "w1000-lr0.0005-x4")
    jobs = calibration.jobs(s, "gigaword", tmp_path, tmp_path, grouped, tmp_path / "out", tmp_path, [st])
    assert sorted(j.name for j in jobs) == sorted(calibration.label(b, st) for b in s.baselines)
    assert all(j.steps[0][0] == "train" and "optim.lr=0.0005" in j.steps[0] for j in jobs)


def test_v2_one_forward_makes_a_tokens_x4_update_in_one_forward_of_four_batches(tmp_path):
    s = calibration.load_spec(REPO / "recipes/calibration/v2/gigaword.yaml")
    batch = resolve(REPO / "recipes/gigaword/6L-6L-post_ln.yaml", "mini").recipe.data.max_tokens
    for j in calibration.jobs(s, "gigaword", tmp_path, tmp_path, False, tmp_path / "out", tmp_path,
                                 one_forward=True):
        args = j.steps[0]
        if j.name.endswith("-x4"):
            assert args[args.index("--tokens-per-gpu") + 1] == str(4 * batch)
        else:  # one batch an update already
            assert "--tokens-per-gpu" not in args


@pytest.mark.parametrize("args, message", [
    (["--tokens-factor", "3"], "--tokens-factor 3: recipes/calibration/v2/mt.yaml has tokens factors 1, 4"),
    (["--setting", "w1000-lr0.002"], "--setting 'w1000-lr0.002': not a setting of recipes/calibration/v2/mt.yaml"),
    (["--setting", "w1000-lr0.001", "--tokens-factor", "1"], "--setting and --tokens-factor: give one"),
    (["--cuda-graphs", "--group"], "--cuda-graphs trains one run per process: add --no-group"),
    (["--one-forward", "--group"], "--one-forward trains one run per process: add --no-group"),
    (["--cuda-graphs"], "--cuda-graphs needs a CUDA device (this machine trains on the CPU)")])
def test_v2_calibrate_refuses_a_factor_outside_the_grid_and_graphs_it_cannot_replay(tmp_path, args, message):
    from typer.testing import CliRunner

    from repro.cli import app
    if "needs a CUDA device" in message and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    r = CliRunner().invoke(app, ["calibrate", "mt", *args, "--runs", str(tmp_path / "runs"), "--results",
                                 str(tmp_path / "results")])
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output
    assert not (tmp_path / "runs").exists()


def test_regime_table_counts_the_recorded_runs_and_says_what_the_decision_waits_for(tmp_path):
    import shutil

    from repro.report import render_regime
    src = REPO / "results/mini/calibration/v2/gigaword"
    records = sorted(p for p in src.glob("*.json") if p.name != "choice.json")
    out = tmp_path / "mini/calibration/v2/gigaword"
    out.mkdir(parents=True)
    for p in records:
        shutil.copy(p, out / p.name)
        shutil.copy(p.with_suffix(".log.jsonl"), out / p.with_suffix(".log.jsonl").name)
    rows = {line.split(" | ")[0].strip("| "): line for line in render_regime(tmp_path).splitlines()[2:]}
    assert set(rows) == {"mt", "gigaword", "wikitext103", "librispeech"}
    assert "| 0 of 16 baseline runs | undecided" in rows["mt"]
    recorded = [json.loads(p.read_text()) for p in records]
    baseline = sum(r["recipe_name"].endswith(("6L-6L-post_ln", "6L-6L-pre_ln")) for r in recorded)
    deep = f", {len(recorded) - baseline} of gigaword/18L-18L-pre_ln" if len(recorded) > baseline else ""
    assert f"| {baseline} of 16 baseline runs{deep}; " in rows["gigaword"]
    from repro.provenance import where
    for machine in {where(r["hardware"]) for r in recorded}:  # each machine once, with its own training time
        assert rows["gigaword"].count(f" on {machine}") == 1
    o = resolve(REPO / "recipes/gigaword/6L-6L-post_ln.yaml", "mini").recipe.optim  # the recipes' regime, the cap
    assert f"| warmup {o.warmup_updates:,}, lr {o.lr:g}, {o.max_updates:,} updates | 12,000 |" in rows["gigaword"]


def test_v2_a_setting_recorded_elsewhere_is_not_trained_again_nor_its_record_replaced(tmp_path):
    """A record collected from another machine's run counts as run; a second run of the same setting (another
    start) never replaces it."""
    s = calibration.load_spec(REPO / "recipes/calibration/v2/gigaword.yaml")
    name, st = s.baselines[1], s.settings()[2]
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{calibration.label(name, st)}.json").write_text('{"started": "2026-11-29T10:00:00+00:00"}')
    todo = calibration.to_run(s, name, st[2], tmp_path / "runs", out)
    assert st not in todo and len(todo) == 3
    jobs = calibration.jobs(s, "gigaword", tmp_path / "runs", tmp_path, False, out, tmp_path)
    assert calibration.label(name, st) not in [j.name for j in jobs] and len(jobs) == 15
    run = tmp_path / "runs" / calibration.label(name, st)
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"status": "completed", "started": "2026-11-30T09:00:00+00:00",
                                                 "recipe_hash": "0123456789ab", "step": 12000}))
    with pytest.raises(RecordError, match="holds another run's record"):
        calibration.collect_runs([(calibration.label(name, st), {})], tmp_path / "runs", out)
    assert json.loads((out / f"{calibration.label(name, st)}.json").read_text())["started"].startswith("2026-11-29")


def test_v2_a_settings_runs_stop_once_the_rule_has_settled_it(tmp_path):
    """Both baselines converged at a validation point (the setting's length L, read from a collected record and a
    run still training alike), or one of them failed: the runs still training there are asked to stop, once; a
    setting not settled trains on, and a finished run is left alone."""
    from repro.train.loop import STOP_FILE
    s = calibration.load_spec(REPO / "recipes/calibration/v2/gigaword.yaml")
    post, pre = s.baselines
    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()

    def live(name, st, curve, status=None, cut=False):
        d = runs / calibration.label(name, st)
        d.mkdir(parents=True)
        text = "".join(json.dumps({"step": u, "loss": 9.0}) + "\n" + json.dumps({"step": u, "valid_nll": v}) + "\n"
                       for u, v in curve)
        (d / "log.jsonl").write_text(text + ('{"step": 99' if cut else ""))  # a line still being written
        if status:
            (d / "status.json").write_text(json.dumps({"status": status, "reason": "loss became nan"}))

    a, b, c = s.settings()[:3]
    settled, slow = plateau(7, 5.0, 3000, cap=6000, every=250), plateau(7, 5.2, 5000, cap=4000, every=250)
    (out / f"{calibration.label(post, a)}.json").write_text(json.dumps({"status": "completed"}))
    (out / f"{calibration.label(post, a)}.log.jsonl").write_text(
        "".join(json.dumps({"step": u, "valid_nll": v}) + "\n" for u, v in plateau(7, 5.1, 2500, 12000, 250)))
    live(pre, a, settled, cut=True)
    live(post, b, settled)
    live(pre, b, slow)
    live(post, c, settled[:4], status="failed")
    live(pre, c, settled[:4])
    L = setting_length([plateau(7, 5.1, 2500, 12000, 250), settled], a[0], s)
    assert L is not None and L <= 6000
    assert calibration.stop_settled(s, runs, out) == [calibration.label(pre, a), calibration.label(pre, c)]
    why = lambda name, st: json.loads((runs / calibration.label(name, st) / STOP_FILE).read_text())["reason"]
    assert why(pre, a) == f"calibration v2: both baselines converged at update {L}, this setting's length"
    assert why(pre, c) == f"calibration v2: {post} failed, so this setting is out"
    assert not any((runs / calibration.label(n, b) / STOP_FILE).exists() for n in s.baselines)
    assert not (runs / calibration.label(post, c) / STOP_FILE).exists()
    assert calibration.stop_settled(s, runs, out) == []  # asked once
    # the rule reads nothing past L: the decision from the curves cut at the stop is the full curves' one
    full = [plateau(7, 5.1, 2500, 12000, 250), plateau(7, 5.0, 3000, 12000, 250)]
    cut = [[(u, v) for u, v in curve if u <= L + 250] for curve in full]
    assert setting_length(cut, a[0], s) == setting_length(full, a[0], s) == L


def test_v2_a_settings_two_baselines_run_side_by_side(tmp_path):
    s = calibration.load_spec(REPO / "recipes/calibration/v2/gigaword.yaml")
    names = [j.name for j in calibration.jobs(s, "gigaword", tmp_path, tmp_path, False, tmp_path / "out",
                                                 tmp_path)]
    assert names == [calibration.label(b, st) for st in s.settings() for b in s.baselines]


def test_v2_the_baseline_further_behind_starts_first(tmp_path):
    """Where one baseline of a setting has trained part-way, its partner starts before it, so the pair meets."""
    s = calibration.load_spec(REPO / "recipes/calibration/v2/gigaword.yaml")
    post, pre = s.baselines
    ahead = tmp_path / calibration.label(post, s.settings()[1])
    ahead.mkdir()
    (ahead / "checkpoint_5000.pt").write_bytes(b"")
    names = [j.name for j in calibration.jobs(s, "gigaword", tmp_path, tmp_path, False, tmp_path / "out",
                                                 tmp_path)]
    assert names[:4] == [calibration.label(post, s.settings()[0]), calibration.label(pre, s.settings()[0]),
                         calibration.label(pre, s.settings()[1]), calibration.label(post, s.settings()[1])]


@pytest.mark.parametrize("damage", ["list record", "running record", "no status", "missing log", "empty log",
                                    "step-less row", "string nll", "negative nll", "list row", "list choice"])
def test_decide_only_refuses_a_damaged_calibration_record_in_one_line(tmp_path, damage):
    """The committed records, one of them damaged (the language model's; Gigaword's finished grid for its
    choice.json): `calibrate --decide-only` names the file and exits 2, and decides nothing from it (no traceback,
    no choice from a running record, an empty log or a validation NLL of -1e9)."""
    import shutil

    from typer.testing import CliRunner

    from repro.cli import app
    task = "gigaword" if damage == "list choice" else "wikitext103"
    out = tmp_path / f"mini/calibration/v2/{task}"
    shutil.copytree(REPO / f"results/mini/calibration/v2/{task}", out)
    base = "gigaword-6L-6L-post_ln-w1000-lr0.001" if task == "gigaword" else "wikitext103-6L-post_ln-w1000-lr0.001"
    record, log = out / f"{base}.json", out / f"{base}.log.jsonl"
    rec = json.loads(record.read_text())
    rows = log.read_text().splitlines()
    if damage == "list record":
        record.write_text("[1, 2]\n")
    elif damage == "running record":
        record.write_text(json.dumps({**rec, "status": "running"}))
    elif damage == "no status":
        record.write_text(json.dumps({k: v for k, v in rec.items() if k != "status"}))
    elif damage == "missing log":
        log.unlink()
    elif damage == "empty log":
        log.write_text("")
    elif damage == "step-less row":
        log.write_text("\n".join(rows + ['{"valid_nll": 3.0}']) + "\n")
    elif damage == "string nll":
        log.write_text("\n".join(rows + ['{"step": 99999, "valid_nll": "low"}']) + "\n")
    elif damage == "negative nll":
        log.write_text("\n".join(rows + ['{"step": 99999, "valid_nll": -1e9}']) + "\n")
    elif damage == "list row":
        log.write_text("\n".join(rows + ["[1, 2]"]) + "\n")
    elif damage == "list choice":
        (out / "choice.json").write_text("[]\n")
    r = CliRunner().invoke(app, ["calibrate", task, "--decide-only", "--results", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) <= 2
    named = out / "choice.json" if damage == "list choice" else (log if "row" in damage or "log" in damage
                                                                  or "nll" in damage else record)
    assert named.name in r.output.replace("\n", "")
