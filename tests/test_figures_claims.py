"""Figures 3/4/7 from the model alone, and the claims check against fixture records."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repro.verdicts import evaluate_claims
from repro.cli import app
from test_tables import fixture_records

runner = CliRunner()


def test_figure3_small_shows_post_ln_decoder_vanishing(tmp_path):
    out, js = tmp_path / "f3.png", tmp_path / "f3.json"
    r = runner.invoke(app, ["figure", "3", "--out", str(out), "--json", str(js), "--layers", "8", "--d-model", "64",
                            "--root", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(js.read_text())
    assert set(data) == {"post_ln", "pre_ln", "b2t"} and len(data["post_ln"]["decoder"]) == 8
    post, b2t = data["post_ln"]["decoder"], data["b2t"]["decoder"]
    # Post-LN's decoder gradient shrinks from the top layer to the bottom one much more than B2T's
    assert post[-1] / post[0] > 2 * (b2t[-1] / b2t[0])


def test_figure4_probe_points(tmp_path):
    js = tmp_path / "f4.json"
    r = runner.invoke(app, ["figure", "4", "--out", str(tmp_path / "f4.png"), "--json", str(js), "--layers", "4",
                            "--d-model", "32", "--root", str(tmp_path)])
    assert r.exit_code == 0, r.output
    points = json.loads(js.read_text())["decoder layer 4"]
    assert list(points) == ["self-attn sum", "self-attn LN", "cross-attn sum", "cross-attn LN", "FFN sum", "last LN"]


def test_figure_from_missing_runs_names_recipes(tmp_path):
    r = runner.invoke(app, ["figure", "1", "--results", str(tmp_path), "--out", str(tmp_path / "f1.png")])
    assert r.exit_code == 2 and "recipes/18L-18L-b2t.yaml" in r.output


def test_claims_verdicts(tmp_path):
    from repro.results import write_record
    from test_tables import record
    bleu = lambda v: {"bleu_average": v}
    # reproduced: two seeds each, ranges apart, the claimed direction (B2T 20-21 > Pre-LN 18-18.5)
    for seed, (b2t, pre) in enumerate(((20.0, 18.0), (21.0, 18.5)), start=1):
        write_record(tmp_path, record("6L-6L-b2t", seed, metrics=bleu(b2t)))
        write_record(tmp_path, record("6L-6L-pre_ln", seed, metrics=bleu(pre)))
    # inconclusive: Post-LN's range 17.9-18.6 overlaps Pre-LN's 18-18.5
    for seed, v in ((1, 17.9), (2, 18.6)):
        write_record(tmp_path, record("6L-6L-post_ln", seed, metrics=bleu(v)))
    # not reproduced: 18L-18L B2T below 6L-6L B2T, apart; a failed seed is never a number
    for seed, v in ((1, 10.0), (2, 11.0)):
        write_record(tmp_path, record("18L-18L-b2t", seed, metrics=bleu(v)))
    write_record(tmp_path, record("18L-18L-b2t", 3, "failed", reason="loss exploded"))
    # training fails: two of two seeds failed; 60L-12L: one seed only
    for seed in (1, 2):
        write_record(tmp_path, record("18L-18L-post_ln", seed, "failed", reason="loss exploded"))
    write_record(tmp_path, record("60L-12L-post_ln", 1, "failed", reason="loss exploded"))
    # Pre-LN at 18L-18L, two seeds apart from B2T's
    for seed in (1, 2):
        write_record(tmp_path, record("18L-18L-pre_ln", seed, metrics=bleu(5.0)))
    # a stale record (another recipe hash) and an override run are not read
    write_record(tmp_path, {**record("6L-6L-b2t_noln", 1, metrics=bleu(20.4)), "recipe_hash": "old"})
    write_record(tmp_path, record("6L-6L-b2t_noln", 1, metrics=bleu(20.4), overrides=["optim.lr=0.002"]))
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "figure3.json").write_text(json.dumps({"post_ln": {"decoder": [0.001, 0.05]},
                                                      "b2t": {"decoder": [0.01, 0.03]}}))
    got = {c["claim"]: (c["verdict"], c["evidence"]) for c in evaluate_claims(tmp_path, "mini", "v1")}
    verdict = lambda prefix: next(v for k, (v, _) in got.items() if k.startswith(prefix))
    assert verdict("6L-6L MT: B2T > Pre-LN") == "reproduced"
    assert verdict("6L-6L MT: Post-LN > Pre-LN") == "inconclusive"
    assert verdict("MT: 18L-18L B2T > 6L-6L B2T") == "not reproduced"
    assert verdict("18L-18L MT: B2T > Pre-LN") == "reproduced"   # 10.5 against 5.0
    assert verdict("18L-18L MT: Post-LN training fails") == "reproduced"
    assert verdict("60L-12L MT: Post-LN training fails") == "inconclusive"
    assert got["60L-12L MT: Post-LN training fails"][1] == "60L-12L-post_ln: 1/1 seeds failed"  # one seed, said once
    assert verdict("18L-18L MT: B2T trains") == "reproduced"     # 1 of 3 seeds failed: the majority trained
    assert verdict("6L-6L MT: B2T w/o LN") == "not run"          # only stale and override records
    assert verdict("18L-18L at init") == "reproduced"            # 50x against 3x
    assert verdict("Trained 6L-6L") == "not run"                 # no layer similarities recorded yet
    sim = lambda c: {"encoder": [[1, c], [c, 1]], "decoder": [[1, c], [c, 1]]}
    for seed, (pre, post) in enumerate(((0.9, 0.5), (0.8, 0.6)), start=1):
        write_record(tmp_path, record("6L-6L-pre_ln", seed, metrics={**bleu(18.0), "layer_cosine": sim(pre)}))
        write_record(tmp_path, record("6L-6L-post_ln", seed, metrics={**bleu(18.0), "layer_cosine": sim(post)}))
    got5 = {c["claim"]: c["verdict"] for c in evaluate_claims(tmp_path, "mini", "v1")}
    assert next(v for k, v in got5.items() if k.startswith("Trained 6L-6L")) == "reproduced"
    assert next(v for k, v in got5.items() if k.startswith("B2T keeps")) == "not run"  # B2T's records lack them
    for seed, b2t in ((1, 0.82), (2, 0.5)):
        write_record(tmp_path, record("6L-6L-b2t", seed, metrics={**bleu(20.0), "layer_cosine": sim(b2t)}))
    got5 = {c["claim"]: c["verdict"] for c in evaluate_claims(tmp_path, "mini", "v1")}
    assert next(v for k, v in got5.items() if k.startswith("B2T keeps")) == "inconclusive"  # 0.82 inside 0.8-0.9
    write_record(tmp_path, record("6L-6L-b2t", 1, metrics={**bleu(20.0), "layer_cosine": sim(0.6)}))
    got5 = {c["claim"]: c["verdict"] for c in evaluate_claims(tmp_path, "mini", "v1")}
    assert next(v for k, v in got5.items() if k.startswith("B2T keeps")) == "reproduced"
    assert "failed" in next(e for k, (v, e) in got.items() if k.startswith("MT: 18L-18L B2T"))
    write_record(tmp_path, record("60L-12L-b2t", 1, "failed", reason="x"))
    write_record(tmp_path, record("60L-12L-b2t", 2, "failed", reason="x"))
    write_record(tmp_path, record("60L-12L-pre_ln", 1, metrics=bleu(4.0)))
    write_record(tmp_path, record("60L-12L-pre_ln", 2, metrics=bleu(4.5)))
    # 16L LM Post-LN trained to the end on two seeds (at a unigram model's perplexity): the claim fails, and the
    # evidence says how far it lags B2T
    ppl = lambda v: {"splits": {"test": {"perplexity": v}}}
    for seed, (post, b2t) in enumerate(((690.0, 218.0), (700.0, 220.0)), start=1):
        write_record(tmp_path, record("wikitext103/16L-post_ln", seed, metrics=ppl(post), task="lm"))
        write_record(tmp_path, record("wikitext103/16L-b2t", seed, metrics=ppl(b2t), task="lm"))
    got = {c["claim"]: (c["verdict"], c["evidence"]) for c in evaluate_claims(tmp_path, "mini", "v1")}
    assert got["16L LM: Post-LN training fails"] == (
        "not reproduced", "wikitext103/16L-post_ln: 0/2 seeds failed; it trains but reaches 695.00 against "
        "wikitext103/16L-b2t 219.00 (seeds 218.00-220.00)")
    got = {c["claim"]: c["verdict"] for c in evaluate_claims(tmp_path, "mini", "v1")}
    assert got["60L-12L MT: B2T > Pre-LN on BLEU"] == "not reproduced"  # B2T failed: not a 0.00 that loses
    # "B2T >= DeepNet, Admin, DLCL, T-Fixup" (B2T 10-11): DeepNet overlaps and Admin has one seed, but T-Fixup is
    # above every B2T seed on two seeds, which settles the conjunction against the paper
    for seed, (deepnet, tfixup, dlcl) in enumerate(((10.5, 12.0, 8.0), (12.0, 13.0, 9.0)), start=1):
        write_record(tmp_path, record("18L-18L-deepnet", seed, metrics=bleu(deepnet)))
        write_record(tmp_path, record("18L-18L-t_fixup", seed, metrics=bleu(tfixup)))
        write_record(tmp_path, record("18L-18L-dlcl", seed, metrics=bleu(dlcl)))
    write_record(tmp_path, record("18L-18L-admin", 1, metrics=bleu(9.0)))
    table5 = lambda: next((c["verdict"], c["evidence"]) for c in evaluate_claims(tmp_path, "mini", "v1")
                          if c["claim"].startswith("18L-18L MT: B2T > each"))
    assert table5()[0] == "not reproduced" and table5()[1].endswith("; not reproduced against 18L-18L-t_fixup")
    for seed in (1, 2):  # T-Fixup below B2T: now DeepNet's overlap and Admin's one seed leave it open
        write_record(tmp_path, record("18L-18L-t_fixup", seed, metrics=bleu(7.0 + seed)))
    verdict, evidence = table5()
    assert verdict == "inconclusive" and evidence.endswith("; inconclusive against 18L-18L-deepnet, 18L-18L-admin")
    for seed in (1, 2):  # every comparison holds
        write_record(tmp_path, record("18L-18L-deepnet", seed, metrics=bleu(7.5 + seed)))
    write_record(tmp_path, record("18L-18L-admin", 2, metrics=bleu(9.5)))
    assert table5()[0] == "reproduced"
    for fmt in ("text", "markdown", "json"):
        r = runner.invoke(app, ["claims", "--scale", "mini", "--results", str(tmp_path), "--format", fmt, "--rules", "v1"])
        assert r.exit_code == 0 and "inconclusive" in r.output, r.output
    assert all(len(l) <= 200 for l in runner.invoke(app, ["claims", "--results", str(tmp_path)]).output.splitlines())


def test_figures_4_and_8_explain_colour_and_failed_seeds(tmp_path, monkeypatch):
    """Figure 4's colours have a legend, not a note in the title; Figure 8 says beside a point how many of its seeds
    failed."""
    import repro.figures.gradients as gradients
    import repro.figures.runs as runs_fig
    from repro.results import log_path, write_record
    from test_tables import record
    figs = []
    monkeypatch.setattr(gradients, "save_figure", lambda fig, *a: figs.append(fig))
    monkeypatch.setattr(runs_fig, "save_figure", lambda fig, *a: figs.append(fig))
    gradients.figure_gradients(4, tmp_path / "f4.png", None, 4, 32, 0, tmp_path)
    labels = [t.get_text() for t in figs[-1].axes[0].get_legend().get_texts()]
    assert labels == ["residual sum (before a LayerNorm)", "just after a LayerNorm"]
    for seed, status in ((1, "completed"), (2, "failed"), (3, "failed")):
        rec = record("18L-18L-post_ln", seed, status, encoder_layers=18, decoder_layers=18, variant="post_ln")
        path = write_record(tmp_path, rec)
        log_path(path).write_text(json.dumps({"step": 500, "valid_nll": 4.8}) + "\n")
    rec = record("60L-12L-b2t", 1, encoder_layers=60, decoder_layers=12, variant="b2t")  # Table 2's, unequal
    log_path(write_record(tmp_path, rec)).write_text(json.dumps({"step": 500, "valid_nll": 3.3}) + "\n")
    data = runs_fig.figure_from_runs(8, tmp_path / "f8.png", None, tmp_path, "mini", tmp_path)
    texts = [t.get_text() for t in figs[-1].axes[0].texts]
    assert texts == ["2 of 3 failed"]
    assert list(data) == ["post_ln"] and len(data["post_ln"]) == 1  # the seeds' mean: one point at 36 layers
    point = data["post_ln"][0]
    assert (point["layers"], point["mean"], point["failed_best"], point["seeds"]) == (36, 4.8, [4.8, 4.8], 3)
    assert len(figs[-1].axes[0].collections) == 1  # the failed seeds' crosses, apart from the line
    notes = " ".join(t.get_text() for t in figs[-1].texts)
    assert "not run at scale 'mini': 6L-6L (Post-LN, Pre-LN, B2T connection); 12L-12L" in notes.replace("\n", " ")
    assert "18L-18L (Pre-LN, B2T connection)" in notes.replace("\n", " ") and "60L-12L" not in notes


def test_curves_of_any_runs_in_one_png(tmp_path):
    for name, losses in (("a", [5.0, 4.0]), ("b", [6.0, 5.5])):
        run = tmp_path / name
        run.mkdir()
        rows = [{"step": i + 1, "loss": l} for i, l in enumerate(losses)] + [{"step": 2, "valid_nll": losses[-1]}]
        (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, js = tmp_path / "c.png", tmp_path / "c.json"
    r = runner.invoke(app, ["curves", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--json", str(js)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(js.read_text())
    assert data["a"]["loss"] == [[1, 5.0], [2, 4.0]] and data["b"]["valid_nll"] == [[2, 5.5]]
    (tmp_path / "b" / "status.json").write_text('{"status": "failed", "reason": "diverged"}')  # marked as failed
    r = runner.invoke(app, ["curves", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--json", str(js)])
    assert r.exit_code == 0 and list(json.loads(js.read_text())) == ["a", "b (failed)"]
    cell = tmp_path / "res/mini/6L-6L-b2t"  # a record's log: as its record says
    cell.mkdir(parents=True)
    (cell / "seed1.log.jsonl").write_text((tmp_path / "a" / "log.jsonl").read_text())
    (cell / "seed1.json").write_text('{"status": "failed", "reason": "diverged"}')
    r = runner.invoke(app, ["curves", str(cell / "seed1.log.jsonl"), "--out", str(out), "--json", str(js)])
    assert r.exit_code == 0 and list(json.loads(js.read_text())) == ["6L-6L-b2t/seed1 (failed)"]
    r = runner.invoke(app, ["curves", str(cell / "seed1.json"), "--out", str(out)])  # the record, not its log
    assert r.exit_code == 2 and f"its log is {cell / 'seed1.log.jsonl'}" in r.output.replace("\n", "")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "log.jsonl").write_text("{not json\n")
    r = runner.invoke(app, ["curves", str(tmp_path / "bad")])
    assert r.exit_code == 2 and "line 1 is not JSON" in r.output
    assert runner.invoke(app, ["curves", str(tmp_path / "none")]).exit_code == 2


@pytest.mark.parametrize("case", ["list row", "string loss", "no step", "empty log", "pdf", "over its log",
                                  "json over a record", "json over its log"])
def test_curves_refuses_in_one_line_what_it_cannot_draw_or_must_not_overwrite(tmp_path, case):
    """Odd log rows, an empty log, an --out that is no PNG, a target that is an input log or a record: one line
    naming the path, exit 2, nothing overwritten."""
    run = tmp_path / "a"
    run.mkdir()
    rows = [json.dumps({"step": 1, "loss": 5.0}), json.dumps({"step": 2, "valid_nll": 4.0})]
    extra = {"list row": "[1, 2]", "string loss": '{"step": 3, "loss": "high"}', "no step": '{"loss": 3.0}'}
    log = run / "log.jsonl"
    log.write_text("" if case == "empty log" else "\n".join(rows + [extra[case]] if case in extra else rows) + "\n")
    record = tmp_path / "seed1.json"
    record.write_text('{"seed": 1}\n')
    before = {p: p.read_bytes() for p in (log, record)}
    out = {"pdf": tmp_path / "c.pdf", "over its log": log}.get(case, tmp_path / "c.png")
    js = {"json over a record": record, "json over its log": log}.get(case)
    r = runner.invoke(app, ["curves", str(run), "--out", str(out), *(["--json", str(js)] if js else [])])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    named = {"pdf": out, "over its log": log, "json over a record": record, "json over its log": log}.get(case, log)
    assert str(named) in r.output.replace("\n", "")
    assert all(p.read_bytes() == b for p, b in before.items()) and not (tmp_path / "c.png").exists()


def test_curves_json_holds_a_diverged_run_as_null(tmp_path):
    run = tmp_path / "a"
    run.mkdir()
    (run / "log.jsonl").write_text('{"step": 1, "loss": 5.0}\n{"step": 2, "loss": NaN}\n{"step": 3, "loss": Infinity}\n')
    js = tmp_path / "c.json"
    r = runner.invoke(app, ["curves", str(run), "--out", str(tmp_path / "c.png"), "--json", str(js)])
    assert r.exit_code == 0, r.output
    assert json.loads(js.read_text())["a"]["loss"] == [[1, 5.0], [2, None], [3, None]]  # strict JSON parses it


def test_tensorboard_event_files_hold_the_logged_curves(tiny_root, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    r = runner.invoke(app, ["train", str(Path(__file__).resolve().parents[1] / "recipes/6L-6L-b2t.yaml"), "--scale",
                            "tiny", "--root", str(tiny_root), "--results", str(tmp_path / "res"), "--run-dir",
                            str(tmp_path / "run"), "--tensorboard"])
    assert r.exit_code == 0, r.output
    events = EventAccumulator(str(tmp_path / "run" / "tb"))
    events.Reload()
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "valid_nll"} <= set(events.Tags()["scalars"])
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [e.value for e in events.Scalars("loss")] == pytest.approx([row["loss"] for row in log if "loss" in row])


def test_tensorboard_after_a_resume_holds_the_log_once(tiny_root, tmp_path):
    """A run stopped after its update-2 checkpoint and resumed: the events after the checkpoint are logged again,
    those of update 2 (its validation among them) are kept, not purged, so TensorBoard holds the log's rows once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    recipe = str(Path(__file__).resolve().parents[1] / "recipes/6L-6L-b2t.yaml")
    run = tmp_path / "run"
    args = ["train", recipe, "--scale", "tiny", "--root", str(tiny_root), "--run-dir", str(run), "--tensorboard"]
    assert runner.invoke(app, [*args, "--results", str(tmp_path / "a")]).exit_code == 0
    for name in ("checkpoint_4.pt", "checkpoint_4.pt.sha256", "status.json"):  # as if killed after update 2's save
        (run / name).unlink()
    r = runner.invoke(app, [*args, "--resume", "--results", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    for key in ("loss", "valid_nll"):
        assert [e.step for e in events.Scalars(key)] == [row["step"] for row in log if key in row], key
    assert 2 in [e.step for e in events.Scalars("valid_nll")]


def test_a_figure_that_is_not_drawn_says_which_are():
    for number, why in ((2, "the paper's figure 2 is a diagram of the layers, not a result"),
                        (10, "the paper's figures are 1 to 9")):
        r = runner.invoke(app, ["figure", str(number)])
        assert r.exit_code == 2 and r.output.strip() == f"error: figure {number}: {why}; the figures drawn are 1 and 3 to 9"


def test_claims_at_a_scale_without_runs_say_figure_3_reads_none():
    out = " ".join(runner.invoke(app, ["claims", "--scale", "tiny"]).output.split())
    assert "1 reproduced" in out and "Figure 3's claim reads no runs: its verdict is the same at every scale" in out
