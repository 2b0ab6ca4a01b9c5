"""The paper's findings as a fixed, cited list, each judged against results/ at one scale by a dated version of
the judging rules (repro/judging.py states them; v2 is current, v1 is kept so that what changed can be shown).

Verdicts: reproduced / not reproduced / inconclusive / not run, and under rules v2 "not informative" for a claim of
a task that calibration v2 found no regime for at that scale (its baselines cannot both learn there). A claim rests on named cells (recipe names below
recipes/) and reads only records of the current recipes (`repro.results.current_records`), each judged by the
rules (a run that learned nothing has failed under v2). A failed seed is never a number. A claim that a beats
several cells is a conjunction: one comparison that goes against it settles it, and it holds only when every
comparison does. Figure 3's claim reads the committed figure data; Figure 5's the layer similarities
`lnrepro evaluate` records.

Here: the claims, the cells they rest on, and the readers the rule versions share. Rules v1 (repro/claims_v1.py)
and v2 (repro/claims_v2.py) are frozen, kept so that what changed can be shown; v3 and v4 (repro/claims_v3.py) have
planned looks, v4 in force; repro/verdicts.py applies a version to every claim.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from repro import judging
from repro.files import read_json
from repro.results import metric_at, stale_note
from repro.tables.spec import SPECS, paper_value

VERDICTS = ("reproduced", "smaller than the paper's", "not reproduced", "inconclusive", "not decidable at this scale",
            "not run", "not informative")
OPTIONAL = ("smaller than the paper's", "not decidable at this scale", "not informative")  # said where one is


def verdict_counts(rows: list[dict]) -> str:
    """"10 reproduced, 3 not reproduced, ...": every verdict, "not informative" only where one is."""
    counts = ", ".join(f"{sum(r['verdict'] == v for r in rows)} {v}" for v in VERDICTS
                       if v not in OPTIONAL or any(r["verdict"] == v for r in rows))
    free = [r for r in rows if r.get("scale_free")]
    return counts + ("; Figure 3's claim reads no runs: its verdict is the same at every scale" if free else "")


def not_informative(results_dir: Path, scale: str) -> dict[str, str]:
    """The tasks calibration v2 found not informative at `scale` (results/<scale>/calibration/v2/<task>/choice.json),
    each with why: their claims read so instead of being judged (repro/calibration.py, choose)."""
    out = {}
    for path in sorted((Path(results_dir) / scale / "calibration" / "v2").glob("*/choice.json")):
        why = json.loads(path.read_text(encoding="utf-8")).get("not_informative")
        if why:
            out[path.parent.name] = why
    return out


def task_folder(recipe_name: str) -> str:
    """A recipe's task as calibration names it: its folder under recipes/ (gigaword, ...), "mt" at the top."""
    return recipe_name.split("/")[0] if "/" in recipe_name else "mt"


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


def claim_cells(claim: Claim) -> list[str]:
    """The recipes a claim's verdict reads: a failure or "trains" claim its one cell, a comparison all its cells
    (figure 3's reads the figure data, no cell)."""
    if claim.kind == "figure3":
        return []
    if claim.kind in ("fails", "trains"):
        return [claim.a]
    return [claim.a, *(b for b in claim.b.split(",") if b)]


BLEU = ("bleu_average",)
R1 = ("splits", "test", "rouge1")
PPL_TEST = ("splits", "test", "perplexity")
WER_TEST = ("splits", "test-other", "wer")
WER_MINI_TEST = ("splits", "test", "wer")  # the mini speech corpus has one test set
CLAIMS = [
    Claim("6L-6L MT: Post-LN > Pre-LN on BLEU", "Table 1", "better", "6L-6L-post_ln", "6L-6L-pre_ln", BLEU),
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
    Claim("18L-18L MT: B2T > each of DeepNet, Admin, DLCL, T-Fixup on BLEU", "Table 5", "better_all", "18L-18L-b2t",
          "18L-18L-deepnet,18L-18L-admin,18L-18L-dlcl,18L-18L-t_fixup", BLEU),
    # Stated 2026-11-30, before the v2 regime's runs, in the form of the two claims above: the paper's sentences
    # "B2T connection outperformed others in the averaged BLEU score in both of 6L-6L and 18L-18L", "B2T connection
    # also outperformed others in the abstractive summarization tasks" (Tables 5, 6) and "B2T connection without
    # layer normalizations achieved comparable scores" (Tables 9, 10), at each depth the tables report.
    Claim("6L-6L MT: B2T > each of DeepNet, Admin, DLCL, T-Fixup on BLEU", "Table 5", "better_all", "6L-6L-b2t",
          "6L-6L-deepnet,6L-6L-admin,6L-6L-dlcl,6L-6L-t_fixup", BLEU),
    Claim("18L-18L MT: B2T w/o LN within 0.5 BLEU of B2T", "Table 9", "close", "18L-18L-b2t_noln", "18L-18L-b2t",
          BLEU, tolerance=0.5),
    Claim("6L-6L summarisation: Post-LN > Pre-LN on ROUGE-1", "Table 2", "better", "gigaword/6L-6L-post_ln",
          "gigaword/6L-6L-pre_ln", R1),
    Claim("18L-18L summarisation: Post-LN training fails", "Table 2", "fails", "gigaword/18L-18L-post_ln",
          "gigaword/18L-18L-b2t", R1),
    Claim("18L-18L summarisation: B2T > Pre-LN on ROUGE-1", "Table 2", "better", "gigaword/18L-18L-b2t",
          "gigaword/18L-18L-pre_ln", R1),
    Claim("6L-6L summarisation: B2T > each of DeepNet, Admin, DLCL, T-Fixup on ROUGE-1", "Table 6", "better_all",
          "gigaword/6L-6L-b2t", "gigaword/6L-6L-deepnet,gigaword/6L-6L-admin,gigaword/6L-6L-dlcl,"
          "gigaword/6L-6L-t_fixup", R1),
    Claim("18L-18L summarisation: B2T > each of DeepNet, Admin, DLCL, T-Fixup on ROUGE-1", "Table 6", "better_all",
          "gigaword/18L-18L-b2t", "gigaword/18L-18L-deepnet,gigaword/18L-18L-admin,gigaword/18L-18L-dlcl,"
          "gigaword/18L-18L-t_fixup", R1),
    Claim("6L-6L summarisation: B2T w/o LN within 0.5 ROUGE-1 of B2T", "Table 10", "close",
          "gigaword/6L-6L-b2t_noln", "gigaword/6L-6L-b2t", R1, tolerance=0.5),
    Claim("18L-18L summarisation: B2T w/o LN within 0.5 ROUGE-1 of B2T", "Table 10", "close",
          "gigaword/18L-18L-b2t_noln", "gigaword/18L-18L-b2t", R1, tolerance=0.5),
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
    # Beyond the paper (Table 11), stated before any run of the newer methods
    Claim("18L-18L MT (extension): DyT in Post-LN's norms fails as Post-LN does", "Table 11", "fails",
          "18L-18L-dyt_post", "18L-18L-b2t", BLEU),
    Claim("60L-12L MT (extension): B2T with the authors' 2023 initialisation trains", "Table 11", "trains",
          "60L-12L-b2t_2023"),
    Claim("18L-18L MT (extension): B2T > each newer method (2023 init, Peri-LN, ResiDual, Mix-LN, DyT, ReZero) "
          "on BLEU", "Table 11", "better_all", "18L-18L-b2t",
          "18L-18L-b2t_2023,18L-18L-peri_ln,18L-18L-residual,18L-18L-mix_ln,18L-18L-dyt_pre,18L-18L-dyt_post,"
          "18L-18L-rezero", BLEU),
    Claim("18L-18L at init: Post-LN's decoder gradient norm vanishes toward the bottom (top/bottom > 10), "
          "B2T's far less (under a fifth of Post-LN's ratio)", "Fig. 3", "figure3", "figure3.json"),
    Claim("Trained 6L-6L MT: Pre-LN's layer outputs are more similar to each other than Post-LN's "
          "(mean off-diagonal cosine over both stacks)", "Fig. 5", "figure5", "6L-6L-pre_ln", "6L-6L-post_ln"),
    Claim("B2T keeps Post-LN's layer transformations at 6L-6L MT: Pre-LN's layer outputs are more similar to each "
          "other than B2T's", "Fig. 5 (c)", "figure5", "6L-6L-pre_ln", "6L-6L-b2t"),
]
FIG3_VANISH, FIG3_B2T_SHARE = 10.0, 0.2


def _mean_offdiag(m: list[list[float]]) -> float:
    n = len(m)
    return statistics.fmean(m[i][j] for i in range(n) for j in range(n) if i != j)


def _judge_figure(claim: Claim, figures_dir: Path, scale: str) -> tuple[str, str]:
    path = figures_dir / claim.a.format(scale=scale)
    if not path.is_file():
        return "not run", f"{path} missing (lnrepro figure 3 --out {path.with_suffix('.png')} --json {path})"
    data = read_json(path)
    if claim.kind == "figure3":
        ratio = {v: data[v]["decoder"][-1] / data[v]["decoder"][0] for v in ("post_ln", "b2t")}
        ok = ratio["post_ln"] > FIG3_VANISH and ratio["b2t"] < FIG3_B2T_SHARE * ratio["post_ln"]
        return ("reproduced" if ok else "not reproduced"), (
            f"decoder top/bottom gradient norm: Post-LN {ratio['post_ln']:.1f}, B2T {ratio['b2t']:.1f} ({path.name})")
    raise ValueError(f"unknown figure claim {claim.kind!r}")


# -- what the rule versions share ------------------------------------------------------------------------------

# Which column of the paper's tables a claim's metric is; perplexity and WER effects are carried over as ratios
# (the mini scores are of another size), BLEU and ROUGE as points.
PAPER_COLUMN = {BLEU: "Average", R1: "R-1", PPL_TEST: "Test", WER_TEST: "Test other"}
RELATIVE = {PPL_TEST, WER_TEST}


def paper_number(recipe_name: str, metric: tuple):
    """The paper's value of a cell in the claim's column (the first table holding the recipe), FAILED or None."""
    column = PAPER_COLUMN.get(metric)
    for number, spec in sorted(SPECS.items()):
        for group, methods in spec.groups.items():
            for method in methods:
                if spec.recipe_name(group, method) == recipe_name and column in spec.columns:
                    return paper_value(number, group, method, spec.columns.index(column))
    return None


def paper_effect(claim: Claim, a: str, b: str, b_mean: float | None) -> float | None:
    """The paper's own difference between the two cells in the claim's direction, in this scale's units."""
    pa, pb = paper_number(a, claim.metric), paper_number(b, claim.metric)
    if not isinstance(pa, float) or not isinstance(pb, float):
        return None
    sign = 1 if claim.higher_is_better else -1
    if claim.metric in RELATIVE:
        return None if b_mean is None else sign * (pa / pb - 1) * b_mean
    return sign * (pa - pb)


def scored_cell(records, name: str, claim: Claim, failed_value=None) -> dict | None:
    """A cell's scores on the claim's metric, from its completed seeds; a failed seed is a reason and, where
    `failed_value(record)` gives one (rules v3: its corpus's trivial reference), a score too."""
    recs = records.get(name)
    if not recs:
        return None
    values, seeds, reasons, scored = [], [], [], 0
    for r in recs:
        m = r.get("metrics") or {}
        v = metric_at(m, claim.metric) if claim.metric else None
        if v is None and claim.or_metric:
            v = metric_at(m, claim.or_metric)
        if r["status"] == "failed":
            reasons.append(f"seed {r['seed']}: {r.get('reason', '')}")
            floor = failed_value(r) if failed_value else None
            if floor is not None:
                values.append(floor)
                seeds.append(r["seed"])
                scored += 1
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            values.append(float(v))
            seeds.append(r["seed"])
    n, failed = len(recs), len(reasons)
    return {"name": name, "n": n, "failed": failed, "values": values, "seeds": seeds, "reasons": reasons,
            "scored_failed": scored,
            "mean": statistics.fmean(values) if values else None,
            "failed_whole": n >= judging.MIN_SEEDS_FAILURE and failed * 2 > n}


def similarity_cell(records, name: str) -> dict | None:
    """Figure 5's cell: each completed seed's mean off-diagonal cosine over both stacks (None: no seed measured)."""
    measured = [r for r in records.get(name, [])
                if r["status"] == "completed" and "layer_cosine" in (r.get("metrics") or {})]
    values = [statistics.fmean([_mean_offdiag(r["metrics"]["layer_cosine"][s]) for s in ("encoder", "decoder")])
              for r in measured]
    if not values:
        return None
    return {"name": name, "n": len(values), "failed": 0, "values": values, "seeds": [r["seed"] for r in measured],
            "reasons": [], "scored_failed": 0, "mean": statistics.fmean(values), "failed_whole": False}


def _brief(c: dict) -> str:
    if c["mean"] is None:
        return f"{c['name']}: {c['failed']}/{c['n']} seeds failed" if c["failed"] else f"{c['name']}: not evaluated"
    failed = f", {c['failed']} failed" if c["failed"] else ""
    return f"{c['name']} {c['mean']:.2f} (n={len(c['values'])}{failed})"


def _missing(names: list[str], records, stale) -> dict:
    notes = [stale_note(n, stale[n]) for n in names if n in stale]
    text = "no records of the current recipe: " + ", ".join(names)
    if notes:
        text += "; waits for runs of the current recipe; " + "; ".join(notes)
    return {"verdict": "not run", "evidence": text}


def failed_whole(claim: Claim, a: dict, c: dict) -> tuple[str, str] | None:
    """(verdict, why) of a comparison a cell that failed on most seeds settles (rules v2 and v3 alike): a method
    that failed never beats one that trained; None where neither did."""
    if a["failed_whole"]:
        return "not reproduced", f"{a['name']} failed on most seeds"
    if c["failed_whole"] and claim.kind != "close" and len(a["values"]) * 2 > a["n"]:
        return "reproduced", f"{c['name']} failed on most seeds, {a['name']} trained"
    if c["failed_whole"]:
        return ("not reproduced" if claim.kind == "close" else "inconclusive"), f"{c['name']} failed on most seeds"
    return None


def run_verdict(claim: Claim, a: dict) -> dict:
    n, failed = a["n"], a["failed"]
    evidence = f"{a['name']}: {failed}/{n} seeds failed" + (f" ({'; '.join(a['reasons'])})" if a["reasons"] else "")
    test = {"test": f"majority of at least {judging.MIN_SEEDS_FAILURE} seeds", "seeds": n, "failed": failed,
            "seeds_needed": judging.MIN_SEEDS_FAILURE}
    if n < judging.MIN_SEEDS_FAILURE or failed * 2 == n:
        return {"verdict": "inconclusive", "evidence": evidence + f"; needs {judging.MIN_SEEDS_FAILURE} seeds and a "
                "majority", "test": test}
    ok = (failed * 2 > n) == (claim.kind == "fails")
    return {"verdict": "reproduced" if ok else "not reproduced", "evidence": evidence, "test": test}


def rules_line(rules: str) -> str:
    return f"judging rules {rules} of {judging.RULES[rules]}, repro/judging.py"
