"""Figures 3/4/7 from the model alone, and the claims check against fixture records."""

import json
from pathlib import Path

from typer.testing import CliRunner

from repro.claims import evaluate_claims
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
    fixture_records(tmp_path)
    from repro.results import write_record
    write_record(tmp_path, {"run_id": "b2t18", "recipe": "recipes/18L-18L-b2t.yaml", "recipe_name": "18L-18L-b2t",
                            "scale": "mini", "seed": 1, "status": "completed", "reason": "", "task": "mt",
                            "metrics": {"bleu_average": 1.0, "splits": {}}})
    # Speech: the mini corpus has one test set, read where the record has no test-other.
    for variant, wer in (("post_ln", 80.0), ("pre_ln", 85.0), ("b2t", 86.0)):
        write_record(tmp_path, {"run_id": f"asr-{variant}", "recipe": f"recipes/librispeech/6L-6L-{variant}.yaml",
                                "recipe_name": f"librispeech/6L-6L-{variant}", "scale": "mini", "seed": 1,
                                "status": "completed", "reason": "", "task": "asr",
                                "metrics": {"splits": {"dev": {"wer": 1.0}, "test": {"wer": wer}}}})
    verdicts = {c["claim"]: c["verdict"] for c in evaluate_claims(tmp_path, "mini")}
    assert verdicts["6L-6L ASR: Post-LN < Pre-LN test-other WER"] == "reproduced"
    assert verdicts["6L-6L ASR: B2T < Pre-LN test-other WER"] == "not reproduced"
    assert verdicts["12L-6L ASR: B2T < Pre-LN test-other WER"] == "not run"
    assert verdicts["6L-6L MT: B2T > Pre-LN on BLEU"] == "reproduced"
    assert verdicts["18L-18L MT: Post-LN training fails"] == "reproduced"
    assert verdicts["6L-6L MT: Post-LN >= Pre-LN on BLEU"] == "not run"
    assert verdicts["18L-18L MT: B2T trains"] == "reproduced"
    r = runner.invoke(app, ["claims", "--scale", "mini", "--results", str(tmp_path)])
    assert r.exit_code == 0 and "reproduced" in r.output
