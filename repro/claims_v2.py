"""Judging rules v2 (2026-11-29), frozen: a claim's comparisons by the tests of repro/judging.py at a fixed seed
count, a run that learned nothing failed. Kept so that what changed since can be shown (`lnrepro claims --rules
v2`, `claims --changed`); v3 (repro/claims_v3.py) reads the same cells."""

from __future__ import annotations

from pathlib import Path

from repro import judging
from repro.claims import (FIG3_B2T_SHARE, FIG3_VANISH, Claim, _brief, _judge_figure, _missing, claim_cells,
                          failed_whole, paper_effect, run_verdict, scored_cell, similarity_cell)


def _compare(claim: Claim, a: dict, c: dict) -> dict:
    """One comparison of a against c: a verdict with its test, or the reason none could be made."""
    out = {"cells": [a["name"], c["name"]]}
    if settled := failed_whole(claim, a, c):
        return {**out, "verdict": settled[0], "why": settled[1]}
    short = [x["name"] for x in (a, c) if len(x["values"]) < judging.MIN_SEEDS_TEST]
    if short:
        return {**out, "verdict": "inconclusive",
                "why": f"fewer than {judging.MIN_SEEDS_TEST} trained seeds: {', '.join(short)}"}
    sign = 1 if claim.higher_is_better else -1
    if claim.kind == "close":
        t = judging.tost(a["values"], c["values"], claim.tolerance)
        verdict = ("reproduced" if t["p"] < judging.ALPHA else
                   "not reproduced" if t["p_outside"] < judging.ALPHA else "inconclusive")
        why = (f"TOST at +-{claim.tolerance:g}: diff {t['diff']:+.2f}, 90% CI [{t['ci90'][0]:+.2f}, "
               f"{t['ci90'][1]:+.2f}], p {t['p']:.3f}")
        if verdict == "inconclusive":
            effect = paper_effect(claim, a["name"], c["name"], c["mean"])
            t["paper_effect"] = effect
            t["seeds_needed"] = (judging.seeds_needed_equivalence(t["sd"], effect, claim.tolerance)
                                 if effect is not None else None)
            if t["seeds_needed"]:
                why += (f"; at the paper's own difference ({effect:+.2f}) equivalence needs {t['seeds_needed']} "
                        "seeds per cell")
        return {**out, "verdict": verdict, "test": t, "why": why}
    w = judging.welch(a["values"], c["values"], sign)
    verdict = ("reproduced" if w.p < judging.ALPHA else "not reproduced" if w.p_against < judging.ALPHA
               else "inconclusive")
    test = w.as_dict()
    why = (f"Welch diff {w.diff:+.2f} in the claim's direction, 95% CI [{w.ci95[0]:+.2f}, {w.ci95[1]:+.2f}], "
           f"p {w.p:.3f}")
    if verdict == "inconclusive":
        effect = paper_effect(claim, a["name"], c["name"], c["mean"])
        test["detectable"] = judging.detectable(w.sd, *w.n)
        test["paper_effect"] = effect
        test["seeds_needed"] = judging.seeds_needed(w.sd, effect) if effect and effect > 0 else None
        why += f"; detectable with these seeds: {test['detectable']:.2f}"
        if test["seeds_needed"]:
            why += f"; the paper's {effect:+.2f} needs {test['seeds_needed']} seeds per cell"
        elif effect is not None and effect <= 0:
            why += f"; the paper's own difference is {effect:+.2f}"
    return {**out, "verdict": verdict, "test": test, "why": why}


def judge(claim: Claim, records: dict[str, list[dict]], stale: dict | None = None,
             figures_dir: Path = Path("results/figures"), scale: str = "mini") -> dict:
    """A claim under rules v2: {"verdict", "evidence", and where a test decided, "test" or "comparisons"}."""
    stale = stale or {}
    if claim.kind == "figure3":
        verdict, evidence = _judge_figure(claim, figures_dir, scale)
        return {"verdict": verdict, "evidence": evidence, "test": {"test": "fixed thresholds on one deterministic "
                f"measurement: Post-LN ratio > {FIG3_VANISH:g}, B2T's < {FIG3_B2T_SHARE:g} of it"}}
    if claim.kind == "figure5":
        cells = [similarity_cell(records, name) for name in (claim.a, claim.b)]
        if None in cells:
            return _missing([n for n, c in zip((claim.a, claim.b), cells) if c is None], records, stale)
        one = _compare(claim, *cells)
        return {"verdict": one["verdict"], "evidence": f"mean cosine {_brief(cells[0])} vs {_brief(cells[1])}; "
                + one["why"], **({"test": one["test"]} if "test" in one else {})}
    names = claim_cells(claim)
    missing = [n for n in names if not records.get(n)]
    if missing:
        return _missing(missing, records, stale)
    cells = [scored_cell(records, n, claim) for n in names]
    if claim.kind in ("fails", "trains"):
        return run_verdict(claim, cells[0])
    a, others = cells[0], cells[1:]
    judged = [_compare(claim, a, c) for c in others]
    evidence = _brief(a) + " vs " + ", ".join(_brief(c) for c in others)
    failed_notes = [r for c in cells for r in c["reasons"]]
    if len(judged) == 1:
        verdict = judged[0]["verdict"]
        evidence += "; " + judged[0]["why"]
    else:
        verdicts = [j["verdict"] for j in judged]
        verdict = next((v for v in ("not reproduced", "inconclusive") if v in verdicts), "reproduced")
        evidence += "; " + "; ".join(f"against {j['cells'][1]}: {j['verdict']} ({j['why']})" for j in judged)
    if failed_notes:
        evidence += "; failed: " + "; ".join(failed_notes)
    return {"verdict": verdict, "evidence": evidence, "comparisons": judged}
