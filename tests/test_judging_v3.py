"""Judging rules v3 (2026-12-03) at their edges: planned looks at a Pocock-type level, "smaller than the paper's",
the seed cap and "not decidable at this scale", Holm within a claim, failed seeds scored as the trivial reference,
one model-code version per claim, and the adjusted p values across a table's claims."""

import math

import pytest

from repro import claims_v3, judging
from repro.claims import CLAIMS, VERDICTS, Claim
from repro.claims_v3 import SMALLER, UNDECIDABLE, adjust_across, failed_score, one_version
from repro.judging import LOOK_ALPHA, LOOKS

BLEU = ("bleu_average",)
DEEPER = next(c for c in CLAIMS if c.text.startswith("MT: 18L-18L B2T > 6L-6L B2T"))  # the paper's effect: +0.77
REFS = {"constant": {"bleu_average": 1.32, "metric": "bleu", "splits": {}}, "unigram": {"valid_nll": 6.2}}


def recs(values, status="completed", version="2026-12-03", start=1):
    return [{"seed": start + i, "status": status, "reason": "" if status == "completed" else "learned nothing",
             "metrics": {"bleu_average": v}, "model_code": version, "variant": "b2t"} for i, v in enumerate(values)]


def judge(claim, cells, refs=REFS):
    return claims_v3.judge(claim, cells, {}, None, "mini", lambda r: refs)


def test_the_look_level_keeps_alpha_over_four_looks():
    assert judging.look_alpha() == pytest.approx(LOOK_ALPHA, abs=2e-4)
    assert judging.look_alpha((5,)) == pytest.approx(judging.ALPHA, abs=2e-4)  # one look: the plain level
    assert [judging.look_of(n) for n in (0, 2, 3, 4, 5, 9, 10, 20, 40)] == [0, 0, 1, 1, 2, 2, 3, 4, 4]
    assert LOOKS[-1] == judging.SEED_CAP == 20


def test_holm_and_benjamini_hochberg():
    assert judging.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert judging.benjamini_hochberg([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.04, 0.04])
    assert judging.holm([0.5]) == [0.5]


def test_the_power_rule_uses_an_upper_bound_of_the_spread_and_stops_at_the_cap():
    a, b = [30.0, 30.2, 29.8], [29.0, 29.3, 28.7]
    assert judging.variance_upper(a) > 0.04  # the sample variance is 0.04
    n, over = judging.seeds_needed_v3(a, b, 0.77)
    assert over is None and 2 <= n <= judging.SEED_CAP
    n, over = judging.seeds_needed_v3([30.0, 33.0, 27.0], [30.0, 32.0, 28.0], 0.77)
    assert n is None and over > judging.SEED_CAP
    assert judging.seeds_needed_v3(a, b, -0.3) == (None, None)


def test_an_interval_below_the_papers_effect_is_smaller_than_the_papers():
    row = judge(DEEPER, {DEEPER.a: recs([30.0, 30.1, 29.9]), DEEPER.b: recs([30.0, 30.05, 29.95])})
    assert row["verdict"] == SMALLER and row["comparisons"][0]["test"]["sign"] == "no difference shown"
    assert row["look"] == 1 and row["model_code"] == "2026-12-03"
    # in the paper's direction, but far less than its +0.77: smaller, the sign said
    row = judge(DEEPER, {DEEPER.a: recs([30.2, 30.21, 30.19, 30.2, 30.2]), DEEPER.b: recs([30.0, 30.01, 29.99, 30.0,
                                                                                          30.0])})
    assert row["verdict"] == SMALLER and row["comparisons"][0]["test"]["sign"] == "in the paper's direction"


def test_reproduced_not_reproduced_and_before_the_first_look():
    assert judge(DEEPER, {DEEPER.a: recs([32.0, 32.1, 31.9]), DEEPER.b: recs([30.0, 30.1, 29.9])})["verdict"] \
        == "reproduced"
    assert judge(DEEPER, {DEEPER.a: recs([28.0, 28.1, 27.9]), DEEPER.b: recs([30.0, 30.1, 29.9])})["verdict"] \
        == "not reproduced"
    row = judge(DEEPER, {DEEPER.a: recs([32.0, 31.0]), DEEPER.b: recs([30.0, 30.1, 29.9])})
    assert row["verdict"] == "inconclusive" and row["comparisons"][0]["test"]["seeds_needed"] == LOOKS[0]


def test_a_p_under_alpha_but_over_the_look_level_waits_for_the_next_look():
    a, b = [31.0, 31.5, 30.8], [30.3, 30.6, 30.5]  # Welch p about 0.038
    row = judge(DEEPER, {DEEPER.a: recs(a), DEEPER.b: recs(b)})
    p = row["comparisons"][0]["test"]["p"]
    assert LOOK_ALPHA < p < judging.ALPHA and row["verdict"] == "inconclusive"
    assert row["comparisons"][0]["test"]["seeds_needed"] == 5


def test_an_effect_past_the_cap_is_not_decidable_and_asks_for_no_runs():
    row = judge(DEEPER, {DEEPER.a: recs([30.0, 33.0, 27.0]), DEEPER.b: recs([30.0, 32.0, 28.0])})
    assert row["verdict"] == UNDECIDABLE
    assert row["comparisons"][0]["test"].get("seeds_needed") is None
    assert row["comparisons"][0]["test"]["would_need"] > judging.SEED_CAP


def test_v4_tests_a_looks_planned_seeds_alone_the_rest_wait_for_the_next_look():
    """Between two looks v3 tested every seed there was, so each record that landed was one more test at the look
    level; v4 (2026-12-05) tests each cell's first LOOKS[k] seeds by seed number, whatever lands after them."""
    a = recs([29.0, 29.4]) + recs([32.0, 32.1, 31.9], start=3)  # seeds 1-2 low, 3-5 high
    b = recs([30.0, 30.1, 29.9])
    a = a[2:] + a[:2]  # records in any order: the look takes seeds by number
    v4 = claims_v3.judge(DEEPER, {DEEPER.a: a, DEEPER.b: b}, {}, None, "mini", lambda r: REFS, at_looks=True)
    v3 = judge(DEEPER, {DEEPER.a: a, DEEPER.b: b})
    first3 = [29.0, 29.4, 32.0]
    assert v4["comparisons"][0]["test"]["diff"] == pytest.approx(sum(first3) / 3 - 30.0)
    assert v3["comparisons"][0]["test"]["diff"] == pytest.approx((29.0 + 29.4 + 32.0 + 32.1 + 31.9) / 5 - 30.0)
    assert "first 3 seeds of each cell by seed number, the 2 past it wait for the next look" in v4["evidence"]
    assert v4["look"] == 1 and "wait" not in v3["evidence"]
    # at 5 vs 5 the look is look 2 and tests all ten; seeds 6+ of one cell would wait again
    b5 = b + recs([30.0, 30.05], start=4)
    v4 = claims_v3.judge(DEEPER, {DEEPER.a: a + recs([10.0], start=6), DEEPER.b: b5}, {}, None, "mini",
                         lambda r: REFS, at_looks=True)
    assert v4["look"] == 2 and v4["comparisons"][0]["test"]["diff"] == pytest.approx(
        (29.0 + 29.4 + 32.0 + 32.1 + 31.9) / 5 - (30.0 + 30.1 + 29.9 + 30.0 + 30.05) / 5)


def test_holm_within_a_claim_of_several_comparisons():
    claim = next(c for c in CLAIMS if c.text.startswith("6L-6L MT: B2T > each of DeepNet"))
    others = claim.b.split(",")
    b2t = [31.0, 31.3, 30.7, 31.1, 30.9]
    cells = {claim.a: recs(b2t), **{o: recs([28.0, 28.2, 27.8, 28.1, 27.9]) for o in others[1:]}}
    cells[others[0]] = recs([x + 0.35 for x in (31.0, 31.2, 30.75, 30.95, 31.05)])  # against B2T: p 0.014
    row = judge(claim, cells)
    first = row["comparisons"][0]
    assert first["test"]["p_against"] < LOOK_ALPHA < first["test"]["p_against_adjusted"]
    assert first["verdict"] != "not reproduced"
    assert [j["verdict"] for j in row["comparisons"][1:]] == ["reproduced"] * 3
    assert row["verdict"] == combine_expected(row)


def combine_expected(row):
    from repro.claims_v3 import combine
    return combine([j["verdict"] for j in row["comparisons"]])


def test_a_failed_seed_scores_its_corpus_trivial_reference():
    assert failed_score(BLEU, (), REFS) == 1.32
    assert failed_score(("splits", "test", "perplexity"), (), {"unigram": {"perplexity": {"test": 714.9}}}) == 714.9
    assert failed_score(("splits", "test", "rouge1"), (), {"constant": {"metric": "rouge1",
                                                                        "splits": {"test": 20.5}}}) == 20.5
    assert failed_score(BLEU, (), None) is None
    cells = {DEEPER.a: recs([31.0, 31.1]) + recs([0.5], status="failed", start=3), DEEPER.b: recs([30.0, 30.1, 29.9])}
    row = judge(DEEPER, cells)
    assert row["comparisons"][0]["test"]["n"] == [3, 3]  # the failed seed counts, at the constant output's 1.32
    assert "scored as the trivial reference" in row["evidence"]


def test_one_model_code_version_per_claim():
    cells = {DEEPER.a: recs([30.0, 30.1, 29.9], version="2026-11-23") + recs([31, 31], version="2026-12-03", start=4),
             DEEPER.b: recs([30.0, 30.1, 29.9], version="2026-11-23") + recs([30, 30], version="2026-12-03", start=4)}
    kept, version, note = one_version(cells, [DEEPER.a, DEEPER.b], LOOKS[0])
    assert version == "2026-11-23" and len(kept[DEEPER.a]) == 3 and "other versions left out" in note
    row = judge(DEEPER, cells)
    assert row["model_code"] == "2026-11-23" and "the left-out seeds lean +1.00" in row["evidence"]
    cells[DEEPER.a] += recs([31], version="2026-12-03", start=6)
    cells[DEEPER.b] += recs([30], version="2026-12-03", start=6)
    assert judge(DEEPER, cells)["model_code"] == "2026-12-03"  # the newest version once it has the seeds
    short = {DEEPER.a: recs([30.0, 30.1], version="2026-11-23") + recs([31.0], start=3),
             DEEPER.b: recs([30.0, 30.1, 29.9])}
    kept, version, note = one_version(short, [DEEPER.a, DEEPER.b], LOOKS[0])
    assert version == "mixed" and "mixes model-code versions" in note


def test_one_version_of_the_code_for_variants_changed_apart():
    """Variants changed apart carry different versions at one state of the code: Admin's 2026-11-29 code is the
    code of the day B2T's q/k/v biases changed (2026-12-03), so those seeds compare; after Admin's own change
    (2026-12-03.2), its new seeds compare with B2T's 2026-12-03 ones, and its older ones are left out."""
    from repro.model import version
    assert version.at("admin", "2026-12-03") == "2026-11-29" and version.at("b2t", "2026-12-03.2") == "2026-12-03"
    assert version.epochs()[:2] == ["2026-12-03.2", "2026-12-03"] and version.epochs()[-1] == version.BEFORE
    b2t, admin = "6L-6L-b2t", "6L-6L-admin"
    admin_recs = lambda vals, v, start=1: [{**r, "variant": "admin"} for r in recs(vals, version=v, start=start)]
    cells = {b2t: recs([30.0, 30.1, 29.9], version="2026-12-03"),
             admin: admin_recs([29.0, 29.1, 28.9], "2026-11-29")}
    kept, v, note = one_version(cells, [b2t, admin], LOOKS[0])
    assert v == "6L-6L-b2t 2026-12-03, 6L-6L-admin 2026-11-29" and not note and len(kept[admin]) == 3
    cells[admin] += admin_recs([29.5, 29.6, 29.4], "2026-12-03.2", start=4)
    kept, v, note = one_version(cells, [b2t, admin], LOOKS[0])
    assert v == "6L-6L-b2t 2026-12-03, 6L-6L-admin 2026-12-03.2" and [r["seed"] for r in kept[admin]] == [4, 5, 6]
    assert "seeds of other versions left out (6L-6L-admin 3)" in note


def test_adjusted_p_values_across_a_tables_claims_are_shown_beside_the_raw():
    rows = [{"source": "Table 1", "comparisons": [{"test": {"p": p}}]} for p in (0.01, 0.04, 0.03)]
    rows.append({"source": "Table 2", "comparisons": [{"test": {"p": 0.2}}]})
    adjust_across(rows)
    assert [r["p_holm"] for r in rows[:3]] == pytest.approx([0.03, 0.06, 0.06])
    assert rows[3]["p_holm"] == rows[3]["p"] == 0.2 and math.isclose(rows[3]["p_bh"], 0.2)


def test_v2_verdicts_stay_computable_and_the_claims_say_what_they_test():
    from pathlib import Path

    from repro.results import current_records
    from repro.verdicts import evaluate_claims
    results = Path(__file__).resolve().parents[1] / "results"
    rows = {r["claim"]: r for r in evaluate_claims(results, "mini", "v2")}
    v2 = {claim: r["verdict"] for claim, r in rows.items()}
    assert set(v2) == {c.text for c in CLAIMS}  # every claim keeps a v2 verdict
    # the LM's records from before its regime change are stale under v2 too: it reads only the current recipe's,
    # however many have landed ("not run" while none has)
    current, stale = current_records(results, "mini")
    cells = ("wikitext103/6L-post_ln", "wikitext103/6L-pre_ln")
    assert all(stale.get(cell) for cell in cells)
    lm = rows["6L LM: Post-LN < Pre-LN test perplexity"]
    if not all(current.get(cell) for cell in cells):
        assert lm["verdict"] == "not run"
    else:
        assert lm["comparisons"][0]["test"]["n"] == [len(current[cell]) for cell in cells]
    assert not any(">=" in c.text for c in CLAIMS)
    v3 = {r["claim"]: r for r in evaluate_claims(results, "mini", "v3")}
    # a verdict of the committed records changes as records land: check that v3 judges them, not what it says
    assert all(r["verdict"] in VERDICTS for r in v3.values())
    assert v3["MT: 18L-18L B2T > 6L-6L B2T on BLEU (deeper is better)"]["verdict"] != "not run"
    for r in v3.values():
        for j in r.get("comparisons", []):
            assert (j.get("test") or {}).get("seeds_needed") is None or j["test"]["seeds_needed"] <= judging.SEED_CAP
    assert isinstance(Claim, type)


def test_claims_text_fits_an_80_column_terminal(monkeypatch):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "repro.cli", "claims"], capture_output=True, text=True,
                         env={**__import__("os").environ, "COLUMNS": "80"}, timeout=120).stdout
    assert out.startswith("The paper's claims") and max(len(line) for line in out.splitlines()) <= 80
    assert "|---" not in out  # text, not Markdown
