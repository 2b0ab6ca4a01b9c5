"""The claims under judging rules v3 (2026-12-03) and v4 (2026-12-05: a look tests its planned seeds alone;
repro/judging.py states the rules, tests/test_judging_v3.py checks them at their edges): planned looks, "smaller
than the paper's", a seed cap with "not decidable at this scale", Holm within a claim of several comparisons,
failed seeds scored as their corpus's trivial reference, and one model-code version per claim. v1 and v2 stay in
repro/claims.py, computable and reported."""

from __future__ import annotations

import statistics
from pathlib import Path

from repro import judging
from repro.claims import (_judge_figure, _missing, claim_cells, failed_whole, paper_effect, run_verdict, scored_cell,
                          similarity_cell)
from repro.judging import LOOK_ALPHA, LOOKS
from repro.model import version as model_code
from repro.results import metric_at

SMALLER = "smaller than the paper's"
UNDECIDABLE = "not decidable at this scale"


def failed_score(metric: tuple, or_metric: tuple, refs: dict | None) -> float | None:
    """What a failed seed scores in a comparison: its corpus's trivial reference on the claim's metric (the
    constant output's BLEU, ROUGE-1 or WER, the unigram model's perplexity); None where the references lack it."""
    if not refs:
        return None
    const, uni = refs.get("constant") or {}, refs.get("unigram") or {}
    for path in (metric, or_metric):
        if not path:
            continue
        if path == ("bleu_average",):
            value = const.get("bleu_average")
        elif path[-1] == "perplexity":
            value = metric_at(uni, ("perplexity", path[1]))
        elif path[0] == "splits" and const.get("metric") == path[-1]:
            value = (const.get("splits") or {}).get(path[1])
        else:
            value = None
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _key(v: str) -> str:
    """Versions in time order: dates, after "before ..." and "unknown"."""
    return v if v[:1].isdigit() else ("0" if v.startswith("before") else "")


def one_version(records: dict[str, list[dict]], names: list[str], need: int) -> tuple[dict, str, str]:
    """The records of `names` at one state of the model code: the newest at which every cell has `need` records of
    the version its variant had then (variants changed apart carry different versions at one state: B2T's and
    Admin's differ since Admin's profile changed alone), with a note of the seeds of other versions left out; else
    all of them, with a note that they mix. Returns (records, version, note), the version one date where the
    cells share it, else each cell's."""
    by = {n: {} for n in names}
    for n in names:
        for r in records.get(n, []):
            by[n].setdefault(model_code.of_record(r), []).append(r)
    variant = {n: next((r.get("variant") for r in records.get(n, []) if r.get("variant")), n.split("-")[-1])
               for n in names}
    for epoch in model_code.epochs():
        want = {n: model_code.at(variant[n], epoch) for n in names}
        if all(len(by[n].get(want[n], [])) >= need for n in names):
            kept = {**records, **{n: by[n][want[n]] for n in names}}
            left = {n: [r for w, rs in by[n].items() if w != want[n] for r in rs] for n in names}
            v = want[names[0]] if len(set(want.values())) == 1 else ", ".join(f"{n} {want[n]}" for n in names)
            note = ""
            if any(left.values()):
                counts = ", ".join(f"{n} {len(rs)}" for n, rs in left.items() if rs)
                note = f"model-code version {v}; seeds of other versions left out ({counts})"
            return kept, v, note
    versions = sorted({v for n in names for v in by[n]}, key=_key, reverse=True)
    if len(versions) > 1:
        counts = "; ".join(f"{n}: " + ", ".join(f"{v} x{len(rs)}" for v, rs in sorted(by[n].items())) for n in names)
        return records, "mixed", f"mixes model-code versions ({counts}): no version has {need} seeds in every cell"
    return records, (versions[0] if versions else ""), ""


def lean(claim, left: dict[str, list[dict]], names: list[str]) -> str:
    """Which way the left-out seeds' difference (first cell minus each other) points, in the claim's direction."""
    sign = 1 if claim.higher_is_better else -1
    means = {}
    for n in names:
        vals = [v for r in left.get(n, []) if r["status"] == "completed"
                and isinstance(v := metric_at(r.get("metrics") or {}, claim.metric)
                               or metric_at(r.get("metrics") or {}, claim.or_metric or ("-",)), (int, float))]
        if vals:
            means[n] = statistics.fmean(vals)
    a = names[0]
    parts = [f"{sign * (means[a] - means[b]):+.2f} against {b}" for b in names[1:] if a in means and b in means]
    return ("the left-out seeds lean " + ", ".join(parts)) if parts else ""


def cell(records, name: str, claim, refs_of) -> dict | None:
    """A cell's scores: completed seeds by the claim's metric, failed seeds by their corpus's trivial reference."""
    return scored_cell(records, name, claim, lambda r: failed_score(claim.metric, claim.or_metric, refs_of(r)))


def _brief(c: dict) -> str:
    if c["mean"] is None:
        return f"{c['name']}: {c['failed']}/{c['n']} seeds failed" if c["failed"] else f"{c['name']}: not evaluated"
    failed = f", {c['failed']} failed" + (" scored as the trivial reference" if c["scored_failed"] else "") \
        if c["failed"] else ""
    return f"{c['name']} {c['mean']:.2f} (n={len(c['values'])}{failed})"


def _plan(n: int) -> int | None:
    """The seeds per cell of the next planned look (None past the last)."""
    return next((k for k in LOOKS if k > n), None)


def at_look(cell: dict, k: int) -> dict:
    """The cell as its look sees it (rules v4): its first `k` scored seeds by seed number."""
    kept = sorted(zip(cell["seeds"], cell["values"]))[:k]
    values = [v for _, v in kept]
    return {**cell, "values": values, "seeds": [s for s, _ in kept], "mean": statistics.fmean(values)}


def compare(claim, a: dict, c: dict, at_looks: bool = False) -> dict:
    """One comparison of a against c: its raw p values and what it says before any adjustment within the claim
    (`settle` turns them into a verdict). `at_looks` (rules v4): the look tests its planned seeds alone."""
    out = {"cells": [a["name"], c["name"]]}
    if settled := failed_whole(claim, a, c):
        return {**out, "fixed": settled[0], "why": settled[1]}
    n = min(len(a["values"]), len(c["values"]))
    look = judging.look_of(n)
    out["look"] = look
    if look == 0:
        return {**out, "fixed": "inconclusive", "test": {"seeds_needed": LOOKS[0]},
                "why": f"before the first look ({LOOKS[0]} scored seeds per cell; {n} now)"}
    waiting = ""
    if at_looks:
        past = len(a["values"]) + len(c["values"]) - 2 * LOOKS[look - 1]
        n = LOOKS[look - 1]
        a, c = at_look(a, n), at_look(c, n)
        if past:
            waiting = (f"; look {look} tests the first {n} seeds of each cell by seed number, the "
                       f"{past} past it wait{'' if past > 1 else 's'} for the next look")
    if claim.kind == "close":
        t = judging.tost(a["values"], c["values"], claim.tolerance)
        effect = paper_effect(claim, a["name"], c["name"], c["mean"])
        need = (judging.seeds_needed_equivalence(t["sd"], effect, claim.tolerance) if effect is not None else None)
        would = need if need and need > judging.SEED_CAP else None
        t.update({"paper_effect": effect, "p_against": t["p_outside"], "look": look, "would_need": would})
        return {**out, "test": t, "p": t["p"], "p_against": t["p_outside"], "p_smaller": None, "n": n,
                "would_need": would,
                "why": f"TOST at +-{claim.tolerance:g}: diff {t['diff']:+.2f}, p {t['p']:.3f}" + waiting}
    sign = 1 if claim.higher_is_better else -1
    w = judging.welch(a["values"], c["values"], sign)
    effect = paper_effect(claim, a["name"], c["name"], c["mean"])
    p_small = judging.p_smaller(w, effect) if effect is not None and effect > 0 else None
    _, would = judging.seeds_needed_v3(a["values"], c["values"], effect)
    test = {**w.as_dict(), "paper_effect": effect, "p_smaller": p_small, "look": look, "would_need": would}
    why = (f"Welch diff {w.diff:+.2f} in the claim's direction, 95% CI [{w.ci95[0]:+.2f}, {w.ci95[1]:+.2f}], "
           f"p {w.p:.3f}" + (f"; the paper's {effect:+.2f}" if effect is not None else "") + waiting)
    return {**out, "test": test, "p": w.p, "p_against": w.p_against, "p_smaller": p_small, "n": n,
            "would_need": would, "why": why}


def settle(one: dict, p_against: float | None, p_small: float | None) -> dict:
    """A comparison's verdict at its look's level, from its (possibly Holm-adjusted) p values."""
    if "fixed" in one:
        return {**one, "verdict": one.pop("fixed")}
    look, n = one["look"], one["n"]
    stage = f"look {look} of {len(LOOKS)} ({n} seeds per cell)"
    verdict, sign = "inconclusive", ""
    if p_against is not None and p_against < LOOK_ALPHA:
        verdict = "not reproduced"  # significant against the paper's direction: the sign itself fails
    elif p_small is not None and p_small < LOOK_ALPHA:
        verdict = SMALLER
        sign = "in the paper's direction" if one["p"] < LOOK_ALPHA else "no difference shown"
    elif one["p"] < LOOK_ALPHA:
        verdict = "reproduced"
    test = {**one["test"], "p_against_adjusted": p_against, "p_smaller_adjusted": p_small}
    why = f"{one['why']}; {stage}"
    if sign:
        why += f"; {SMALLER} (one-sided bound under it, p {p_small:.3f}), sign: {sign}"
        test["sign"] = sign
    if verdict == "inconclusive":
        if one.get("would_need"):
            verdict = UNDECIDABLE
            why += (f"; the paper's effect needs {one['would_need']} seeds per cell, more than the cap of "
                    f"{judging.SEED_CAP}")
        else:
            plan = _plan(n)
            test["seeds_needed"] = plan
            why += f"; next look at {plan} seeds per cell" if plan else "; the last look: no more seeds planned"
    return {**{k: v for k, v in one.items() if k not in ("test", "why")}, "verdict": verdict, "test": test,
            "why": why}


def combine(verdicts: list[str]) -> str:
    """A claim of several comparisons: not reproduced when one is (after Holm), reproduced when all are."""
    for v in ("not reproduced", UNDECIDABLE, "inconclusive"):
        if v in verdicts:
            return v
    return "reproduced" if all(v == "reproduced" for v in verdicts) else SMALLER


def _run(claim, a: dict) -> dict:
    return run_verdict(claim, a)


def judge(claim, records: dict[str, list[dict]], stale: dict, figures_dir: Path, scale: str, refs_of,
          at_looks: bool = False) -> dict:
    """A claim under rules v3, or with `at_looks` v4 (each look tests its planned seeds alone): {"verdict",
    "evidence", "model_code", "versions" (each cell's, where one state of the code was found), and where a test
    decided, "test" or "comparisons" (each with its verdict)}."""
    if claim.kind == "figure3":
        verdict, evidence = _judge_figure(claim, figures_dir, scale)
        return {"verdict": verdict, "evidence": evidence, "test": {"test": "fixed thresholds on one deterministic "
                "measurement"}}
    names = [claim.a, claim.b] if claim.kind == "figure5" else claim_cells(claim)
    missing = [n for n in names if not records.get(n)]
    if missing:
        return _missing(missing, records, stale)
    need = judging.MIN_SEEDS_FAILURE if claim.kind in ("fails", "trains") else LOOKS[0]
    kept, code, note = one_version(records, names, need)
    left = {n: [r for r in records.get(n, []) if r not in kept.get(n, [])] for n in names}
    versions = {} if code == "mixed" else {n: model_code.of_record(kept[n][0]) for n in names if kept.get(n)}
    if claim.kind == "figure5":
        cells = [similarity_cell(kept, name) for name in names]
        if None in cells:
            return _missing([n for n, c in zip(names, cells) if c is None], records, stale)
    else:
        cells = [cell(kept, n, claim, refs_of) for n in names]
    extra = "; ".join(x for x in (note, lean(claim, left, names) if note and claim.kind != "figure5" else "") if x)
    if claim.kind in ("fails", "trains"):
        out = _run(claim, cells[0])
        return {**out, "evidence": out["evidence"] + (f"; {extra}" if extra else ""), "model_code": code,
                "versions": versions}
    a, others = cells[0], cells[1:]
    raw = [compare(claim, a, c, at_looks) for c in others]
    tested = [i for i, j in enumerate(raw) if "fixed" not in j]
    adj_against = dict(zip(tested, judging.holm([raw[i]["p_against"] for i in tested]))) if tested else {}
    smalls = [i for i in tested if raw[i]["p_smaller"] is not None]
    adj_small = dict(zip(smalls, judging.holm([raw[i]["p_smaller"] for i in smalls]))) if smalls else {}
    judged = [settle(j, adj_against.get(i), adj_small.get(i)) for i, j in enumerate(raw)]
    evidence = ("mean cosine " if claim.kind == "figure5" else "") + _brief(a) + " vs " + \
        ", ".join(_brief(c) for c in others)
    if len(judged) == 1:
        verdict = judged[0]["verdict"]
        evidence += "; " + judged[0]["why"]
    else:
        verdict = combine([j["verdict"] for j in judged])
        evidence += "; Holm within the claim; " + "; ".join(
            f"against {j['cells'][1]}: {j['verdict']} ({j['why']})" for j in judged)
    failed_notes = [r for c in cells for r in c["reasons"]]
    if failed_notes:
        evidence += "; failed: " + "; ".join(failed_notes)
    if extra:
        evidence += "; " + extra
    looks = [j.get("look") for j in judged if j.get("look") is not None]
    return {"verdict": verdict, "evidence": evidence, "comparisons": judged, "model_code": code,
            "versions": versions, **({"look": min(looks)} if looks else {})}


def claim_p(row: dict) -> float | None:
    """A claim's one p value: its comparison's; for several, the largest (the intersection-union test's)."""
    ps = [j["test"].get("p") for j in row.get("comparisons", []) if isinstance(j.get("test", {}).get("p"), float)]
    return max(ps) if ps and len(ps) == len(row.get("comparisons", [])) else None


def adjust_across(rows: list[dict]) -> None:
    """Beside each claim's raw p, the Holm- and Benjamini-Hochberg-adjusted p over its table's claims (shown, not
    used by the verdicts)."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if claim_p(r) is not None:
            groups.setdefault(r["source"].split(",")[0].split(" (")[0], []).append(i)
    for members in groups.values():
        ps = [claim_p(rows[i]) for i in members]
        for i, h, b in zip(members, judging.holm(ps), judging.benjamini_hochberg(ps)):
            rows[i].update({"p": ps[members.index(i)], "p_holm": h, "p_bh": b})
