"""The paper's findings as a fixed, cited list, each judged against results/ at one scale.

Verdicts: reproduced / not reproduced / inconclusive / not run. A claim rests on named cells (recipe names below
recipes/) and reads only records of the current recipes (`repro.results.current_records`). A cell's value is the
mean over its completed seeds; a failed seed is never a number. A comparison is inconclusive when it rests on one
seed or when the seed ranges of the compared cells overlap. A claim that a beats several cells is a conjunction:
one comparison that goes against it settles it, and it holds only when every comparison does. Figure 3's claim
reads the committed figure data; Figure 5's the layer similarities `lnrepro evaluate` records.
"""

from __future__ import annotations

import json
import statistics
import textwrap
from dataclasses import dataclass
from pathlib import Path

from repro.results import current_records

VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not run")


@dataclass(frozen=True)
class Claim:
    text: str
    source: str
    kind: str
    """better: a beats b; better_all: a beats every cell in b; close: |a - b| <= tolerance; fails: a's training
    failed; trains: a completed; figure3: the committed figure data; figure5: a's layer outputs more similar than
    b's, from the records."""
    a: str
    b: str = ""
    metric: tuple = ()   # path into metrics
    higher_is_better: bool = True
    tolerance: float = 0.0
    or_metric: tuple = ()  # used where a record lacks `metric` (the mini speech corpus has one test set)


BLEU = ("bleu_average",)
R1 = ("splits", "test", "rouge1")
PPL_TEST = ("splits", "test", "perplexity")
WER_TEST = ("splits", "test-other", "wer")
WER_MINI_TEST = ("splits", "test", "wer")  # the mini speech corpus has one test set
CLAIMS = [
    Claim("6L-6L MT: Post-LN >= Pre-LN on BLEU", "Table 1", "better", "6L-6L-post_ln", "6L-6L-pre_ln", BLEU),
    Claim("6L-6L MT: B2T > Pre-LN on BLEU", "Table 1", "better", "6L-6L-b2t", "6L-6L-pre_ln", BLEU),
    Claim("18L-18L MT: Post-LN training fails", "Table 1, Fig. 1", "fails", "18L-18L-post_ln", "18L-18L-b2t", BLEU),
    Claim("18L-18L MT: B2T trains", "Table 1, Fig. 1", "trains", "18L-18L-b2t"),
    Claim("18L-18L MT: B2T > Pre-LN on BLEU", "Table 1", "better", "18L-18L-b2t", "18L-18L-pre_ln", BLEU),
    Claim("MT: 18L-18L B2T > 6L-6L B2T on BLEU (deeper is better)", "Table 1", "better", "18L-18L-b2t",
          "6L-6L-b2t", BLEU),
    Claim("60L-12L MT: Post-LN training fails", "Table 1", "fails", "60L-12L-post_ln", "60L-12L-b2t", BLEU),
    Claim("60L-12L MT: B2T > Pre-LN on BLEU", "Table 1", "better", "60L-12L-b2t", "60L-12L-pre_ln", BLEU),
    Claim("6L-6L MT: B2T w/o LN within 0.5 BLEU of B2T", "Table 9", "close", "6L-6L-b2t_noln", "6L-6L-b2t", BLEU,
          tolerance=0.5),
    Claim("18L-18L MT: B2T >= DeepNet, Admin, DLCL, T-Fixup on BLEU", "Table 5", "better_all", "18L-18L-b2t",
          "18L-18L-deepnet,18L-18L-admin,18L-18L-dlcl,18L-18L-t_fixup", BLEU),
    Claim("6L-6L summarisation: Post-LN > Pre-LN on ROUGE-1", "Table 2", "better", "gigaword/6L-6L-post_ln",
          "gigaword/6L-6L-pre_ln", R1),
    Claim("18L-18L summarisation: Post-LN training fails", "Table 2", "fails", "gigaword/18L-18L-post_ln",
          "gigaword/18L-18L-b2t", R1),
    Claim("18L-18L summarisation: B2T > Pre-LN on ROUGE-1", "Table 2", "better", "gigaword/18L-18L-b2t",
          "gigaword/18L-18L-pre_ln", R1),
    Claim("6L LM: Post-LN < Pre-LN test perplexity", "Table 3", "better", "wikitext103/6L-post_ln",
          "wikitext103/6L-pre_ln", PPL_TEST, higher_is_better=False),
    Claim("6L LM: B2T < Pre-LN test perplexity", "Table 3", "better", "wikitext103/6L-b2t", "wikitext103/6L-pre_ln",
          PPL_TEST, higher_is_better=False),
    Claim("16L LM: Post-LN training fails", "Table 3", "fails", "wikitext103/16L-post_ln", "wikitext103/16L-b2t",
          PPL_TEST),
    Claim("16L LM: B2T < Pre-LN test perplexity", "Table 3", "better", "wikitext103/16L-b2t", "wikitext103/16L-pre_ln",
          PPL_TEST, higher_is_better=False),
    Claim("6L-6L ASR: Post-LN < Pre-LN test WER (test-other at paper scale)", "Table 4", "better",
          "librispeech/6L-6L-post_ln", "librispeech/6L-6L-pre_ln", WER_TEST, higher_is_better=False,
          or_metric=WER_MINI_TEST),
    Claim("6L-6L ASR: B2T < Pre-LN test WER (test-other at paper scale)", "Table 4", "better", "librispeech/6L-6L-b2t",
          "librispeech/6L-6L-pre_ln", WER_TEST, higher_is_better=False, or_metric=WER_MINI_TEST),
    Claim("12L-6L ASR: Post-LN training fails", "Table 4", "fails", "librispeech/12L-6L-post_ln",
          "librispeech/12L-6L-b2t", WER_TEST, or_metric=WER_MINI_TEST),
    Claim("12L-6L ASR: B2T < Pre-LN test WER (test-other at paper scale)", "Table 4", "better",
          "librispeech/12L-6L-b2t", "librispeech/12L-6L-pre_ln", WER_TEST, higher_is_better=False,
          or_metric=WER_MINI_TEST),
    Claim("18L-18L at init: Post-LN's decoder gradient norm vanishes toward the bottom (top/bottom > 10), "
          "B2T's far less (under a fifth of Post-LN's ratio)", "Fig. 3", "figure3", "figure3.json"),
    Claim("Trained 6L-6L MT: Pre-LN's layer outputs are more similar to each other than Post-LN's "
          "(mean off-diagonal cosine over both stacks)", "Fig. 5", "figure5", "6L-6L-pre_ln", "6L-6L-post_ln"),
    Claim("B2T keeps Post-LN's layer transformations at 6L-6L MT: Pre-LN's layer outputs are more similar to each "
          "other than B2T's", "Fig. 5 (c)", "figure5", "6L-6L-pre_ln", "6L-6L-b2t"),
]
FIG3_VANISH, FIG3_B2T_SHARE = 10.0, 0.2


def _lookup(metrics: dict, path: tuple):
    for k in path:
        metrics = metrics.get(k) if isinstance(metrics, dict) else None
    return metrics


def _cell(records: dict[str, list[dict]], name: str, metric: tuple, or_metric: tuple = ()):
    recs = records.get(name, [])
    if not recs:
        return None
    values = []
    for r in recs:
        v = _lookup(r.get("metrics") or {}, metric)
        if v is None and or_metric:
            v = _lookup(r.get("metrics") or {}, or_metric)
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
        # Trained to the end: say how far it lags the method the paper says trains (DESIGN section 5).
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


def _mean_offdiag(m: list[list[float]]) -> float:
    n = len(m)
    return statistics.fmean(m[i][j] for i in range(n) for j in range(n) if i != j)


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


def _judge_figure(claim: Claim, figures_dir: Path, scale: str) -> tuple[str, str]:
    path = figures_dir / claim.a.format(scale=scale)
    if not path.is_file():
        return "not run", f"{path} missing (lnrepro figure 3 --out {path.with_suffix('.png')} --json {path})"
    data = json.loads(path.read_text())
    if claim.kind == "figure3":
        ratio = {v: data[v]["decoder"][-1] / data[v]["decoder"][0] for v in ("post_ln", "b2t")}
        ok = ratio["post_ln"] > FIG3_VANISH and ratio["b2t"] < FIG3_B2T_SHARE * ratio["post_ln"]
        return ("reproduced" if ok else "not reproduced"), (
            f"decoder top/bottom gradient norm: Post-LN {ratio['post_ln']:.1f}, B2T {ratio['b2t']:.1f} ({path.name})")
    raise ValueError(f"unknown figure claim {claim.kind!r}")


def judge(claim: Claim, records: dict[str, list[dict]], figures_dir: Path = Path("results/figures"),
          scale: str = "mini") -> tuple[str, str]:
    if claim.kind in ("fails", "trains"):
        return _judge_run(claim, records)
    if claim.kind == "figure5":
        return _judge_figure5(claim, records)
    if claim.kind == "figure3":
        return _judge_figure(claim, figures_dir, scale)
    return _judge_compare(claim, records)


def evaluate_claims(results_dir: Path, scale: str) -> list[dict]:
    records, _ = current_records(results_dir, scale)
    figures = Path(results_dir) / "figures"
    return [{"claim": c.text, "source": c.source, "verdict": v, "evidence": e}
            for c in CLAIMS for v, e in [judge(c, records, figures, scale)]]


def render_claims(results_dir: Path, scale: str, fmt: str = "text") -> str | None:
    """text: a rich table on a wide terminal, else one compact block per claim; markdown; json."""
    rows = evaluate_claims(results_dir, scale)
    counts = ", ".join(f"{sum(r['verdict'] == v for r in rows)} {v}" for v in VERDICTS)
    if fmt == "json":
        return json.dumps({"scale": scale, "results": str(results_dir), "claims": rows}, indent=2) + "\n"
    if fmt == "markdown":
        lines = [f"Claims at scale '{scale}': {counts}.", "", "| claim | paper | verdict | evidence |",
                 "|---|---|---|---|"]
        lines += [f"| {r['claim']} | {r['source']} | {r['verdict']} | {r['evidence']} |" for r in rows]
        return "\n".join(lines) + "\n"
    if fmt != "text":
        raise ValueError(f"--format {fmt!r}: expected text, markdown or json")
    from repro.progress import console
    if console.is_terminal and console.width >= 140:
        from rich.table import Table
        t = Table(title=f"The paper's claims at scale '{scale}' ({counts})")
        for col in ("claim", "paper", "verdict", "evidence"):
            t.add_column(col)
        colour = {"reproduced": "green", "not reproduced": "red", "inconclusive": "yellow", "not run": "dim"}
        for r in rows:
            t.add_row(r["claim"], r["source"], f"[{colour[r['verdict']]}]{r['verdict']}[/]", r["evidence"])
        console.print(t)
        return None
    out = [f"The paper's claims at scale '{scale}': {counts}", ""]
    for r in rows:
        out += [f"[{r['verdict']}] {r['claim']} ({r['source']})",
                textwrap.fill(r["evidence"], 116, initial_indent="    ", subsequent_indent="    ",
                              break_on_hyphens=False)]
    return "\n".join(out) + "\n"
