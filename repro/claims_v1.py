"""Judging rules v1 (2026-11-24), frozen: a claim's cells compared by their seeds' means, inconclusive when a
comparison rests on one seed or when the seed ranges of the compared cells overlap. Kept so that what changed since
can be shown (`lnrepro claims --rules v1`, `claims --changed`)."""

from __future__ import annotations

import statistics
from pathlib import Path

from repro.claims import Claim, _judge_figure, _mean_offdiag
from repro.results import metric_at


def _cell(records: dict[str, list[dict]], name: str, metric: tuple, or_metric: tuple = ()):
    recs = records.get(name, [])
    if not recs:
        return None
    values = []
    for r in recs:
        v = metric_at(r.get("metrics") or {}, metric)
        if v is None and or_metric:
            v = metric_at(r.get("metrics") or {}, or_metric)
        if r["status"] == "completed" and metric and isinstance(v, (int, float)):
            values.append(float(v))
    return {"failed": sum(r["status"] == "failed" for r in recs), "n": len(recs), "values": values,
            "mean": statistics.fmean(values) if values else None}


def _show(name: str, c: dict) -> str:
    if c["mean"] is None:
        return f"{name}: training failed ({c['failed']}/{c['n']} seeds)" if c["failed"] else f"{name}: not evaluated"
    seeds = (f"seeds {min(c['values']):.2f}-{max(c['values']):.2f}" if len(c["values"]) > 1 else "1 seed")
    failed = f", {c['failed']} failed" if c["failed"] else ""
    return f"{name} {c['mean']:.2f} ({seeds}{failed})"


def _judge_run(claim: Claim, records) -> tuple[str, str]:
    a = _cell(records, claim.a, claim.metric, claim.or_metric)
    if a is None:
        return "not run", f"no records of the current recipe: {claim.a}"
    failed = a["failed"] * 2 > a["n"]
    detail = f"{claim.a}: {a['failed']}/{a['n']} seeds failed"
    if claim.kind == "fails" and not failed and claim.b:
        # Trained to the end: say how far it lags the method the paper says trains.
        other = _cell(records, claim.b, claim.metric, claim.or_metric)
        if other and other["mean"] is not None and a["mean"] is not None:
            detail += f"; it trains but reaches {a['mean']:.2f} against {_show(claim.b, other)}"
    if a["n"] < 2:  # "0/1 seeds failed" already says it rests on one seed
        return "inconclusive", detail
    ok = failed if claim.kind == "fails" else not failed
    return ("reproduced" if ok else "not reproduced"), detail


def _judge_compare(claim: Claim, records) -> tuple[str, str]:
    others = claim.b.split(",")
    a = _cell(records, claim.a, claim.metric, claim.or_metric)
    cells = [_cell(records, b, claim.metric, claim.or_metric) for b in others]
    if a is None or any(c is None for c in cells):
        missing = [n for n, c in zip([claim.a, *others], [a, *cells]) if c is None]
        return "not run", "no records of the current recipe: " + ", ".join(missing)
    detail = _show(claim.a, a) + " vs " + ", ".join(_show(b, c) for b, c in zip(others, cells))
    judged = [_compare_one(claim, a, c) for c in cells]
    if len(others) == 1:
        verdict, why = judged[0]
        return verdict, detail + (f"; {why}" if why else "")
    verdicts = [v for v, _ in judged]
    # "a beats every cell in b" is a conjunction: one comparison against it settles it; otherwise all must hold
    for v in ("not reproduced", "not run", "inconclusive"):
        if v in verdicts:
            against = [b for b, w in zip(others, verdicts) if w == v]
            return v, detail + f"; {v} against " + ", ".join(against)
    return "reproduced", detail


def _compare_one(claim: Claim, a: dict, c: dict) -> tuple[str, str]:
    """One comparison of cell a against cell c by the module's seed rules: the verdict, and the overlap when that
    decided it."""
    if min(a["n"], c["n"]) < 2:
        return "inconclusive", ""
    if a["mean"] is None:  # the claimed-better method failed (or was never scored): never a number
        return ("not reproduced" if a["failed"] else "not run"), ""
    if c["mean"] is None:
        if not c["failed"]:
            return "not run", ""
        return ("not reproduced" if claim.kind == "close" else "reproduced"), ""  # it beat a failed run
    if claim.kind == "close":
        return ("reproduced" if abs(a["mean"] - c["mean"]) <= claim.tolerance else "not reproduced"), ""
    if min(a["values"]) <= max(c["values"]) and min(c["values"]) <= max(a["values"]):
        return "inconclusive", "seed ranges overlap"
    sign = 1 if claim.higher_is_better else -1
    return ("reproduced" if sign * (a["mean"] - c["mean"]) > 0 else "not reproduced"), ""


def _judge_figure5(claim: Claim, records) -> tuple[str, str]:
    """Each seed's mean off-diagonal cosine (encoder and decoder), from the layer similarities `evaluate` records;
    then the seed rules of any comparison."""
    cells = {}
    for name in (claim.a, claim.b):
        values = [statistics.fmean([_mean_offdiag(r["metrics"]["layer_cosine"][s]) for s in ("encoder", "decoder")])
                  for r in records.get(name, []) if "layer_cosine" in (r.get("metrics") or {})]
        if not values:
            return "not run", f"no evaluated records of the current recipe: {name}"
        cells[name] = {"values": values, "mean": statistics.fmean(values), "n": len(values), "failed": 0}
    a, b = cells[claim.a], cells[claim.b]
    detail = f"mean cosine {_show(claim.a, a)} vs {_show(claim.b, b)}"
    if min(a["n"], b["n"]) < 2:
        return "inconclusive", detail
    if min(a["values"]) <= max(b["values"]) and min(b["values"]) <= max(a["values"]):
        return "inconclusive", detail + "; seed ranges overlap"
    return ("reproduced" if a["mean"] > b["mean"] else "not reproduced"), detail


def judge(claim: Claim, records: dict[str, list[dict]], figures_dir: Path = Path("results/figures"),
             scale: str = "mini") -> tuple[str, str]:
    if claim.kind in ("fails", "trains"):
        return _judge_run(claim, records)
    if claim.kind == "figure5":
        return _judge_figure5(claim, records)
    if claim.kind == "figure3":
        return _judge_figure(claim, figures_dir, scale)
    return _judge_compare(claim, records)
