"""Judging rules v2 at each of their edges: learned nothing, the tests, the seed rules; and the trivial references."""

import json
import math
import random

import pytest
from scipy import stats
from typer.testing import CliRunner

from repro import judging
from repro.verdicts import evaluate_claims
from repro.cli import app
from repro.eval import metrics
from repro.references import (best_constant_bleu, best_constant_rouge1, best_constant_wer, compute_references,
                              unigram_nll)
from repro.results import write_record
from test_tables import record

runner = CliRunner()

MT_REFS = {"data": {"corpus": "multi30k", "files_sha256": "x"}, "task": "mt", "unigram": {"valid_nll": 6.0},
           "constant": {"output": "Ein Mann.", "metric": "bleu", "bleu_average": 1.5, "splits": {}}}
LM_REFS = {"task": "lm", "unigram": {"perplexity": {"test": 700.0}, "valid_nll": 6.5}}
ASR_REFS = {"task": "asr", "unigram": {"valid_nll": 5.0},
            "constant": {"output": "", "metric": "wer", "splits": {"test": 100.0}}}


def mt(nll=2.0, bleu=30.0, **extra):
    return {"task": "mt", "status": "completed", "metrics": {"valid_nll": nll, "bleu_average": bleu, **extra}}


# -- learned nothing -------------------------------------------------------------------------------------------

def test_learned_nothing_nll_margin_edges():
    assert judging.learned_nothing(mt(nll=6.0 - 0.1 - 1e-9), MT_REFS) is None
    why = judging.learned_nothing(mt(nll=6.0 - 0.1 + 1e-9), MT_REFS)
    assert why.startswith("learned nothing: validation NLL") and "6.00" in why


def test_learned_nothing_constant_output_edges():
    assert judging.learned_nothing(mt(bleu=1.5 + 1.0), MT_REFS) is None            # exactly one point better
    why = judging.learned_nothing(mt(bleu=1.5 + 1.0 - 1e-9), MT_REFS)
    assert "constant output" in why and "Ein Mann." in why
    # its NLL shows it learned the targets' language: the label says what happened, not "learned nothing"
    assert why.startswith("output no better than one constant sentence: BLEU 2.50") and "NLL 2.00" in why
    bare = {"task": "mt", "status": "completed", "metrics": {"bleu_average": 2.0}}
    assert judging.learned_nothing(bare, MT_REFS).startswith("learned nothing: BLEU 2.00")  # no NLL recorded
    asr = lambda w: {"task": "asr", "status": "completed", "metrics": {"valid_nll": 2.0, "splits": {"test": {"wer": w}}}}
    assert judging.learned_nothing(asr(99.0), ASR_REFS) is None                     # lower is better
    assert "test WER 99.50" in judging.learned_nothing(asr(99.5), ASR_REFS)


def test_learned_nothing_lm_perplexity_edges():
    lm = lambda p: {"task": "lm", "status": "completed", "metrics": {"splits": {"test": {"perplexity": p}}}}
    edge = 700.0 * math.exp(-0.1)
    assert judging.learned_nothing(lm(edge * 0.999), LM_REFS) is None
    assert "unigram" in judging.learned_nothing(lm(edge * 1.001), LM_REFS)


def test_source_blind_edges_and_missing_checks():
    assert judging.learned_nothing(mt(source_blind_nll=2.1 + 1e-9), MT_REFS) is None
    assert judging.learned_nothing(mt(source_blind_nll=2.1 - 1e-9), MT_REFS).startswith("ignores its input")
    assert judging.learned_nothing(mt(), None) is None          # no references: not applied
    assert judging.learned_nothing(mt(nll=9.0), {"unigram": {}}) is None


def test_judge_record_keeps_v1_and_health_failures():
    rec = mt(nll=7.0)
    assert judging.judge_record(rec, MT_REFS, "v1") == ("completed", None) or \
        judging.judge_record(rec, MT_REFS, "v1")[0] == "completed"
    assert judging.judge_record(rec, MT_REFS, "v2")[0] == "failed"
    failed = {**rec, "status": "failed", "reason": "loss exploded"}
    assert judging.judge_record(failed, MT_REFS, "v2") == ("failed", "loss exploded")
    with pytest.raises(ValueError):
        judging.judge_record(rec, MT_REFS, "v9")


# -- tests -----------------------------------------------------------------------------------------------------

def test_welch_matches_scipy_both_directions():
    a, b = [30.1, 30.6, 30.3], [29.5, 30.0, 29.4, 29.8]
    w = judging.welch(a, b, 1)
    ref = stats.ttest_ind(a, b, equal_var=False, alternative="greater")
    assert w.p == pytest.approx(ref.pvalue) and w.t == pytest.approx(ref.statistic)
    assert w.p_against == pytest.approx(stats.ttest_ind(a, b, equal_var=False, alternative="less").pvalue)
    lo, hi = w.ci95
    assert lo < w.diff < hi and w.diff == pytest.approx(sum(a) / 3 - sum(b) / 4)
    down = judging.welch(a, b, -1)   # lower is better: the claimed direction flips
    assert down.p == pytest.approx(w.p_against) and down.diff == pytest.approx(-w.diff)


def test_welch_exact_difference():
    w = judging.welch([2.0, 2.0], [1.0, 1.0])
    assert (w.p, w.p_against, w.as_dict()["t"]) == (0.0, 1.0, None)
    json.dumps(w.as_dict())  # valid JSON: no infinity


def test_tost_inside_outside_and_undecided():
    inside = judging.tost([30.0, 30.1, 29.9, 30.05], [30.02, 29.95, 30.1, 29.98], 0.5)
    assert inside["p"] < 0.05
    outside = judging.tost([31.5, 31.6, 31.4, 31.55], [30.0, 30.1, 29.9, 30.05], 0.5)
    assert outside["p"] > 0.05 and outside["p_outside"] < 0.05
    wide = judging.tost([29.0, 31.0], [30.5, 29.5], 0.5)
    assert wide["p"] > 0.05 and wide["p_outside"] > 0.05


def test_power_figures():
    # the classic normal-approximation figure for d = 1 at one-sided 5% and 80% power is 13 per group; the t
    # distribution asks one more
    assert judging.seeds_needed(1.0, 1.0) == 14
    assert judging.seeds_needed(0.3, 0.5) < judging.seeds_needed(0.3, 0.25)
    assert judging.seeds_needed(0.3, 0.0) is None and judging.seeds_needed(0.0, 0.5) == judging.MIN_SEEDS_TEST
    assert judging.detectable(0.3, 3, 3) > judging.detectable(0.3, 10, 10)
    n = judging.seeds_needed(0.3, 0.5)
    assert judging.detectable(0.3, n, n) <= 0.5 < judging.detectable(0.3, n - 1, n - 1)


def test_equivalence_seeds_give_the_two_one_sided_tests_their_power():
    """At the seeds it asks for, TOST shows equivalence about four times in five when the true difference is the
    paper's (simulated); at half of them far less often; none where the difference is not inside the margin."""
    n = judging.seeds_needed_equivalence(0.5, 0.2, 0.5)
    assert n == judging.seeds_needed(0.5, 0.3) and 20 < n < 60
    assert judging.seeds_needed_equivalence(0.5, -0.2, 0.5) == n  # the side does not matter
    assert judging.seeds_needed_equivalence(0.5, 0.5, 0.5) is None
    assert judging.seeds_needed_equivalence(0.5, 0.7, 0.5) is None
    assert judging.seeds_needed_equivalence(float("nan"), 0.1, 0.5) is None
    rng = random.Random(3)

    def shown(seeds: int, trials: int = 400) -> float:
        hits = 0
        for _ in range(trials):
            a = [rng.gauss(30.2, 0.5) for _ in range(seeds)]
            b = [rng.gauss(30.0, 0.5) for _ in range(seeds)]
            hits += judging.tost(a, b, 0.5)["p"] < judging.ALPHA
        return hits / trials

    assert 0.7 < shown(n) < 0.92
    assert shown(n // 2) < 0.6


def test_an_equivalence_its_power_cannot_reach_under_the_cap_is_not_decidable(tmp_path):
    """6L-6L B2T w/o LN (20, 22, 21) against B2T (20.5, 21.5, 21): TOST cannot decide; at the paper's own difference
    (Table 9: -0.05 BLEU) and these seeds' SD, equivalence needs more seeds per cell than the cap (rules v3), so the
    claim is not decidable at this scale and asks for none of them."""
    from repro.needed import missing_runs
    mt6 = {"encoder_layers": 6, "decoder_layers": 6}
    for name, values in (("6L-6L-b2t_noln", (20.0, 22.0, 21.0)), ("6L-6L-b2t", (20.5, 21.5, 21.0))):
        for seed, v in enumerate(values, start=1):
            write_record(tmp_path, record(name, seed, metrics={"bleu_average": v}, **mt6))
    row = _get({c["claim"]: c for c in evaluate_claims(tmp_path, "mini", "v3")}, "6L-6L MT: B2T w/o LN within 0.5")
    assert row["verdict"] == "not decidable at this scale"
    test = row["comparisons"][0]["test"]
    assert test["would_need"] > judging.SEED_CAP and test.get("seeds_needed") is None
    rows = {r["recipe"]: r for r in missing_runs(tmp_path, "mini")}
    assert rows["6L-6L-b2t_noln"]["needed"] == 5 and not rows["6L-6L-b2t_noln"]["by_power"]


# -- claims under v2 -------------------------------------------------------------------------------------------

def _claims(results):
    return {c["claim"]: c for c in evaluate_claims(results, "mini", "v2")}


def _get(got, prefix):
    return next(v for k, v in got.items() if k.startswith(prefix))


def test_claims_v2_directional_verdicts(tmp_path):
    bleu = lambda v: {"bleu_average": v}
    for seed, (b2t, pre, post) in enumerate(((31.0, 30.0, 29.5), (31.2, 30.1, 30.9), (31.1, 29.9, 30.2)), start=1):
        write_record(tmp_path, record("6L-6L-b2t", seed, metrics=bleu(b2t)))
        write_record(tmp_path, record("6L-6L-pre_ln", seed, metrics=bleu(pre)))
        write_record(tmp_path, record("6L-6L-post_ln", seed, metrics=bleu(post)))
    got = _claims(tmp_path)
    b2t = _get(got, "6L-6L MT: B2T > Pre-LN")
    assert b2t["verdict"] == "reproduced" and "Welch" in b2t["evidence"]
    assert b2t["comparisons"][0]["test"]["p"] < 0.05
    post = _get(got, "6L-6L MT: Post-LN > Pre-LN")
    assert post["verdict"] == "inconclusive"
    test = post["comparisons"][0]["test"]
    assert test["seeds_needed"] > 3 and test["detectable"] > 0 and test["paper_effect"] == pytest.approx(0.49)
    assert "needs" in post["evidence"]
    # the opposite direction, significant: not reproduced
    for seed, v in ((1, 28.0), (2, 28.2), (3, 28.1)):
        write_record(tmp_path, record("18L-18L-b2t", seed, metrics=bleu(v)))
    assert _get(_claims(tmp_path), "MT: 18L-18L B2T > 6L-6L B2T")["verdict"] == "not reproduced"


def test_claims_v2_one_trained_seed_is_inconclusive_and_failed_cells(tmp_path):
    bleu = lambda v: {"bleu_average": v}
    write_record(tmp_path, record("60L-12L-b2t", 1, metrics=bleu(25.0)))
    for seed in (1, 2):
        write_record(tmp_path, record("60L-12L-pre_ln", seed, metrics=bleu(20.0 + seed)))
    got = _get(_claims(tmp_path), "60L-12L MT: B2T > Pre-LN")
    assert got["verdict"] == "inconclusive" and "fewer than 2 trained seeds: 60L-12L-b2t" in got["evidence"]
    # failure claims: two of two failed is not enough; two of three is a majority
    for seed in (1, 2):
        write_record(tmp_path, record("60L-12L-post_ln", seed, "failed", reason="loss exploded"))
    assert _get(_claims(tmp_path), "60L-12L MT: Post-LN training fails")["verdict"] == "inconclusive"
    write_record(tmp_path, record("60L-12L-post_ln", 3, metrics=bleu(5.0)))
    assert _get(_claims(tmp_path), "60L-12L MT: Post-LN training fails")["verdict"] == "reproduced"
    # B2T failed on most of three seeds: it cannot beat a method that trained
    for seed in (2, 3):
        write_record(tmp_path, record("60L-12L-b2t", seed, "failed", reason="loss exploded"))
    assert _get(_claims(tmp_path), "60L-12L MT: B2T > Pre-LN")["verdict"] == "not reproduced"


def test_claims_v2_learned_nothing_counts_as_failed(tmp_path):
    refs = {**MT_REFS, "data": {"corpus": "multi30k", "files_sha256": "fp"}}
    (tmp_path / "references").mkdir()
    (tmp_path / "references" / "multi30k.json").write_text(json.dumps(refs))
    data = {"corpus": "multi30k", "files_sha256": "fp"}
    for seed in (1, 2, 3):  # trained to the end, at the unigram's NLL and a constant output's BLEU
        write_record(tmp_path, record("18L-18L-post_ln", seed, metrics={"valid_nll": 6.0, "bleu_average": 1.2},
                                      data=data))
    got = _get(_claims(tmp_path), "18L-18L MT: Post-LN training fails")
    assert got["verdict"] == "reproduced" and "learned nothing" in got["evidence"]
    assert _get(evaluate_claims_by(tmp_path, "v1"), "18L-18L MT: Post-LN training fails")["verdict"] == "not reproduced"
    from repro.tables.render import render_table
    md = render_table(1, "mini", "markdown", tmp_path)
    assert "Training failed / Training failed" in md and "learned nothing" in md


def evaluate_claims_by(results, rules):
    return {c["claim"]: c for c in evaluate_claims(results, "mini", rules)}


def test_claims_v2_conjunction_and_equivalence(tmp_path):
    bleu = lambda v: {"bleu_average": v}
    for seed, (b2t, deepnet, admin, dlcl, tfix) in enumerate(
            ((31.0, 30.0, 30.2, 29.9, 32.0), (31.2, 30.1, 30.0, 30.0, 32.2), (31.1, 29.9, 30.1, 29.8, 32.1)), start=1):
        for name, v in (("b2t", b2t), ("deepnet", deepnet), ("admin", admin), ("dlcl", dlcl), ("t_fixup", tfix)):
            write_record(tmp_path, record(f"18L-18L-{name}", seed, metrics=bleu(v)))
    got = _get(_claims(tmp_path), "18L-18L MT: B2T > each of DeepNet")
    assert got["verdict"] == "not reproduced" and "against 18L-18L-t_fixup: not reproduced" in got["evidence"]
    assert [c["verdict"] for c in got["comparisons"]] == ["reproduced"] * 3 + ["not reproduced"]
    for seed, (b2t, noln) in enumerate(((31.0, 31.05), (31.1, 31.0), (30.9, 31.02), (31.05, 30.95)), start=1):
        write_record(tmp_path, record("6L-6L-b2t", seed, metrics=bleu(b2t)))
        write_record(tmp_path, record("6L-6L-b2t_noln", seed, metrics=bleu(noln)))
    close = _get(_claims(tmp_path), "6L-6L MT: B2T w/o LN")
    assert close["verdict"] == "reproduced" and close["comparisons"][0]["test"]["test"].startswith("TOST")


def test_claims_v2_stale_cells_say_what_they_wait_for(tmp_path):
    write_record(tmp_path, {**record("18L-18L-t_fixup", 1, metrics={"bleu_average": 30.0}), "recipe_hash": "old",
                            "stale_reason": "trained at lr 1e-3, not the recipe's 5e-4"})
    got = _get(_claims(tmp_path), "18L-18L MT: B2T > each of DeepNet")
    assert got["verdict"] == "not run"
    assert "waits for runs of the current recipe" in got["evidence"] and "lr 1e-3" in got["evidence"]


def test_claims_cli_prints_rules_and_json_has_the_tests(tmp_path):
    for seed, (b2t, pre) in enumerate(((31.0, 30.0), (31.2, 30.1), (31.1, 29.9)), start=1):
        write_record(tmp_path, record("6L-6L-b2t", seed, metrics={"bleu_average": b2t}))
        write_record(tmp_path, record("6L-6L-pre_ln", seed, metrics={"bleu_average": pre}))
    r = runner.invoke(app, ["claims", "--results", str(tmp_path)])
    assert r.exit_code == 0 and f"judging rules v4 of {judging.RULES['v4']}" in r.output
    data = json.loads(runner.invoke(app, ["claims", "--results", str(tmp_path), "--format", "json"]).output)
    assert data["rules"] == "v4" and data["rules_date"] == judging.RULES["v4"]
    r = runner.invoke(app, ["claims", "--results", str(tmp_path), "--rules", "v2"])
    assert r.exit_code == 0 and f"judging rules v2 of {judging.RULES['v2']}" in r.output
    row = next(c for c in data["claims"] if c["claim"].startswith("6L-6L MT: B2T > Pre-LN"))
    assert {"test", "diff", "ci95", "p", "n"} <= set(row["comparisons"][0]["test"])
    assert runner.invoke(app, ["claims", "--results", str(tmp_path), "--rules", "v7"]).exit_code == 2
    none = runner.invoke(app, ["claims", "--results", str(tmp_path), "--changed", "--format", "markdown"])
    assert none.exit_code == 0 and "changed from rules v3 to v4: 0" in none.output
    assert "|---" not in none.output  # nothing changed: the count, no empty table
    for seed, b2t in ((4, 29.0), (5, 29.4)):  # B2T's seeds past the first look: v3 tests them, v4 waits for look 2
        write_record(tmp_path, record("6L-6L-b2t", seed, metrics={"bleu_average": b2t}))
    changed = runner.invoke(app, ["claims", "--results", str(tmp_path), "--changed"])
    assert changed.exit_code == 0 and "changed from rules v3 to v4: 1" in changed.output
    assert "not decidable at this scale -> reproduced" in changed.output
    assert "|---" not in changed.output  # text in a terminal; --format markdown for the table
    md = runner.invoke(app, ["claims", "--results", str(tmp_path), "--changed", "--format", "markdown"])
    assert md.exit_code == 0 and "|---|---|---|---|" in md.output
    older = runner.invoke(app, ["claims", "--results", str(tmp_path), "--changed", "--rules", "v2"])
    assert older.exit_code == 0 and "changed from rules v1 to v2" in older.output


# -- references ------------------------------------------------------------------------------------------------

def test_unigram_nll_is_add_one_frequencies():
    import numpy as np
    train = np.array([0, 0, 1])
    # counts +1: [3, 2, 1] over 6
    assert unigram_nll(train, np.array([0, 2]), 3) == pytest.approx(-(math.log(3 / 6) + math.log(1 / 6)) / 2)


CANDIDATES = ["a man plays a guitar .", "two dogs run on the grass .", "a man .", "a woman in a red dress sings .",
              "people walk", "a dog runs on the grass with a man ."]
REFS = ["a man plays guitar on a stage .", "a dog runs on the grass .", "two men play a game .",
        "a woman sings a song .", "a man and a dog walk on the beach ."]


def test_best_constant_outputs_equal_brute_force():
    rng = random.Random(0)
    words = "a man dog runs on the grass plays guitar woman sings .".split()
    cands = CANDIDATES + [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(40)]
    bleu = lambda h: metrics.bleu([h] * len(REFS), REFS)[0]
    assert bleu(best_constant_bleu(cands, REFS)) == pytest.approx(max(map(bleu, cands)))
    rouge = lambda h: metrics.rouge([h] * len(REFS), REFS)["rouge1"]
    assert rouge(best_constant_rouge1(cands, REFS)) == pytest.approx(max(map(rouge, cands)))
    wer = lambda h: metrics.wer([h] * len(REFS), REFS)
    assert wer(best_constant_wer(cands, REFS)) == pytest.approx(min([100.0, *map(wer, cands)]))


def test_references_of_a_prepared_corpus(tmp_path):
    from repro.data.tiny import ensure_tiny_corpora
    ensure_tiny_corpora(tmp_path)
    ref = compute_references(tmp_path / "tiny_parallel", "mt", "valid", ["test"])
    assert ref["unigram"]["valid_nll"] > 0 and ref["constant"]["candidates"] > 1
    assert ref["constant"]["output"] in (tmp_path / "tiny_parallel" / "train.raw.tgt").read_text().splitlines()
    r = runner.invoke(app, ["references", "recipes/6L-6L-b2t.yaml", "--scale", "tiny", "--root", str(tmp_path),
                            "--results", str(tmp_path / "res")])
    assert r.exit_code == 0, r.output
    written = json.loads((tmp_path / "res" / "references" / "tiny_parallel.json").read_text())
    assert written["data"]["corpus"] == "tiny_parallel" and written == json.loads(json.dumps(ref))


def test_shifted_sources_pair_each_target_with_another_source(tmp_path):
    from repro.data.batching import ParallelData
    from repro.data.tiny import ensure_tiny_corpora
    from repro.train.loop import ShiftedSources
    ensure_tiny_corpora(tmp_path)
    data = ParallelData(tmp_path / "tiny_parallel", "valid")
    n = len(data)
    true, shifted = data.collate([0, n - 1]), ShiftedSources(data).collate([0, n - 1])
    assert (shifted["target"] == true["target"]).all()
    assert (shifted["src"][0][: len(data.src[1]) + 1] == data.collate([1])["src"][0]).all()
    assert (shifted["src"][1][: len(data.src[0]) + 1] == data.collate([0])["src"][0]).all()  # wraps around


def test_references_found_by_fingerprint_else_by_corpus_name():
    refs = {("speech_mini", "today"): {"id": 1}, ("multi30k", "a"): {"id": 2}, ("multi30k", "b"): {"id": 3}}
    find = lambda data: judging.references_for({"data": data, "recipe_name": "x", "scale": "mini"}, refs)
    assert find({"corpus": "multi30k", "files_sha256": "b"}) == {"id": 3}
    # another machine's audio, the same transcripts: the one references file of the corpus's name
    assert find({"corpus": "speech_mini", "files_sha256": "other"}) == {"id": 1}
    assert find({"corpus": "multi30k", "files_sha256": "c"}) is None   # two candidates: none is chosen
    assert find({"corpus": "gigaword_sample", "files_sha256": "c"}) is None


def test_a_task_calibration_v2_found_not_informative_has_its_claims_read_so(committed_results):
    """A v2 choice.json saying "not informative" (here written by hand for Gigaword) turns that task's claims into
    "not informative", with the reason; other tasks' verdicts and rules v1's are untouched."""
    import json

    from repro.verdicts import evaluate_claims, render_claims
    results = committed_results()
    before = {r["claim"]: r["verdict"] for r in evaluate_claims(results, "mini")}
    choice = results / "mini/calibration/v2/gigaword/choice.json"
    choice.parent.mkdir(parents=True, exist_ok=True)  # the grid's committed runs may be there
    choice.write_text(json.dumps({"choice": None, "not_informative": "no setting of the grid lets both baselines "
                                                                     "learn"}))
    after = {r["claim"]: r for r in evaluate_claims(results, "mini")}
    for claim, verdict in before.items():
        if "summarisation" in claim:
            assert after[claim]["verdict"] == "not informative"
            assert after[claim]["evidence"] == ("calibration v2 found gigaword not informative at mini: no setting of "
                                                "the grid lets both baselines learn")
        else:
            assert after[claim]["verdict"] == verdict, claim
    assert any("summarisation" in c for c in before)
    assert "not informative" in render_claims(results, "mini", "markdown")
    assert all(r["verdict"] != "not informative" for r in evaluate_claims(results, "mini", "v1"))


def test_findings_ask_of_each_claim_only_the_runs_its_own_verdict_needs(tmp_path):
    """6L-6L B2T (20, 21) against Pre-LN (19, 20.5) is before its first look and asks both cells for its third seed;
    B2T w/o LN (10, 10.5, 10.2) against B2T is decisively not within 0.5 BLEU (B2T failed on no seed, and w/o LN lies
    10 points under it), so that decided claim asks for nothing (rules v3), though Table 9 lists its cells."""
    from repro.findings import render_findings
    mt6 = {"encoder_layers": 6, "decoder_layers": 6}
    for name, values in (("6L-6L-b2t", (20.0, 21.0)), ("6L-6L-pre_ln", (19.0, 20.5)),
                         ("6L-6L-b2t_noln", (10.0, 10.5, 10.2))):
        for seed, v in enumerate(values, start=1):
            write_record(tmp_path, record(name, seed, metrics={"bleu_average": v}, **mt6))
    lines = render_findings(tmp_path, "mini").splitlines()
    first = next(x for x in lines if "6L-6L MT: B2T > Pre-LN" in x)
    assert first.startswith("- inconclusive:") and "before the first look" in first
    assert "still to run: 2 runs (6L-6L-b2t seed 3, 6L-6L-pre_ln seed 3)" in first
    decided = next(x for x in lines if "6L-6L MT: B2T w/o LN within 0.5 BLEU" in x)
    assert decided.startswith("- inconclusive:") or decided.startswith("- not reproduced:")
    if decided.startswith("- not reproduced:"):
        assert "still to run" not in decided


def test_findings_say_per_task_what_each_claim_reads_and_the_runs_and_hours_it_still_needs(tmp_path):
    """The findings (repro/findings.py) group each task's claims by verdict, with the test that decided each and the
    runs its cells lack: priced as wall time on the fastest machine setting that recorded a pace of them all, a
    two-core CPU training two one-thread runs at once, each started as one ends."""
    from repro.findings import hours, render_findings
    from repro.pace import recipe_updates
    cpu = {"device": "cpu (x86_64)", "cpu": "Intel(R) Xeon(R) Processor (AVX512)", "cpu_id":
           "GenuineIntel family 6 model 167", "cpu_count": 2, "gpus": 0, "threads": 1}
    bleu = lambda v: {"bleu_average": v}
    for seed, (post, pre) in enumerate(((28.0, 31.0), (28.3, 31.2)), start=1):
        # 100 updates in 600 s each: 6 s an update of the recipe's batches
        write_record(tmp_path, record("6L-6L-post_ln", seed, metrics=bleu(post), updates=100, duration_s=600.0,
                                      cpu_s=598.0, hardware=cpu))
        write_record(tmp_path, record("6L-6L-pre_ln", seed, metrics=bleu(pre), updates=100, duration_s=600.0,
                                      cpu_s=598.0, hardware=cpu))
    text = render_findings(tmp_path, "mini")
    mt = text.split("**Summarisation")[0]
    assert mt.startswith("**Machine translation") and "0 reproduced, 0 not reproduced, 1 inconclusive" in mt
    line = next(x for x in mt.splitlines() if "6L-6L MT: Post-LN > Pre-LN" in x)
    assert line.startswith("- inconclusive: 6L-6L MT: Post-LN > Pre-LN on BLEU (Table 1): before the first look")
    wall = 2 * recipe_updates("6L-6L-post_ln", "mini") * 6.0 / 2  # two runs, side by side
    assert line.endswith(f"still to run: 2 runs (6L-6L-post_ln seed 3, 6L-6L-pre_ln seed 3); "
                         f"{hours(wall)} on Intel Xeon 6/167, 1 thread")
    # three runs on two cores take two runs' time, as the local launcher schedules them, not one and a half
    from repro.findings import needs
    from repro.needed import missing_runs
    from repro.pace import machine_paces
    rows = {r["recipe"]: r for r in missing_runs(tmp_path, "mini")}
    three = {"6L-6L-post_ln": {**rows["6L-6L-post_ln"], "seeds": [3, 4, 5]}}
    assert needs(["6L-6L-post_ln"], three, tmp_path, "mini", machine_paces(tmp_path, "mini")).endswith(
        f"{hours(2 * recipe_updates('6L-6L-post_ln', 'mini') * 6.0)} on Intel Xeon 6/167, 1 thread")
    # a claim of a depth no record priced, and a task with no record at all
    deep = next(x for x in mt.splitlines() if "18L-18L MT: B2T trains" in x)
    assert deep.startswith("- not run:") and deep.endswith("(18L-18L-b2t seeds 1, 2, 3); not priced: no record "
                                                           "keeps a pace of this depth")
    assert "**Language modelling (Table 3)**: 0 reproduced, 0 not reproduced, 0 inconclusive, 4 not run" in text
    # the README's summary: every missing run once, per task and depth, priced the same way
    from repro.findings import fastest, render_still_to_run
    summary = render_still_to_run(tmp_path, "mini").splitlines()
    missing = missing_runs(tmp_path, "mini")
    assert summary[0].startswith(f"**Still to run at scale 'mini': {sum(len(r['seeds']) for r in missing)} runs**")
    mt6 = [r for r in missing if r["group"] == "6L-6L" and r["recipe"].count("/") == 0]
    known = machine_paces(tmp_path, "mini")
    assert summary[4] == (f"| mt | 6L-6L | {sum(len(r['seeds']) for r in mt6)} | "
                          f"{fastest(mt6, tmp_path, 'mini', known)} |")
    assert "on Intel Xeon 6/167, 1 thread" in summary[4]
    assert summary[5].startswith("| mt | 18L-18L |") and summary[5].endswith("not priced: no record keeps a pace "
                                                                              "of this depth |")
    assert [x.split(" | ")[0] for x in summary[4:]] == sorted(
        [x.split(" | ")[0] for x in summary[4:]], key=["| mt", "| gigaword", "| wikitext103", "| librispeech"].index)
    # a depth whose records keep no pace (no CPU threads recorded) is priced as `reproduce --plan` prices it: as
    # its whole runs took, here 18L-18L B2T's one hour for each of the depth's missing runs
    write_record(tmp_path, record("18L-18L-b2t", 1, metrics=bleu(29.0), duration_s=3600.0,
                                  hardware={k: v for k, v in cpu.items() if k != "threads"}))
    deep = [r for r in missing_runs(tmp_path, "mini") if r["group"] == "18L-18L" and "/" not in r["recipe"]]
    assert fastest(deep, tmp_path, "mini", machine_paces(tmp_path, "mini")) == (
        f"about {hours(3600.0 * sum(len(r['seeds']) for r in deep))} one at a time, as whole runs of it took (no "
        f"record keeps a pace of this depth)")


def test_findings_name_each_failed_cell_the_papers_method_first(tmp_path):
    from repro.findings import render_findings
    write_record(tmp_path, record("18L-18L-post_ln", 1, "failed", reason="validation NLL diverged to 10.089 at "
                                  "update 5500, above ln(8000)"))
    write_record(tmp_path, record("60L-12L-b2t", 1, "failed", reason="output no better than one constant sentence: "
                                  "BLEU 1.08"))
    text = render_findings(tmp_path, "mini")
    assert ("- runs that failed, as the judging rules read them: 60L-12L-b2t (the paper's B2T connection): 1 of 1 "
            "seed (output no better than one constant sentence), 18L-18L-post_ln: 1 of 1 seed (validation NLL "
            "diverged)") in text
    assert text.count("runs that failed") == 1  # the other tasks have none
