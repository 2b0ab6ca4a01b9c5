"""The rules that judge runs and claims, versioned and dated: their constants are data here, their tests are at
each edge (tests/test_judging.py). A rule is never adjusted after seeing what it decides; one that proves wrong
gets a new version beside the old, and both versions' verdicts are reported (`lnrepro claims --rules`).

Rules v1 (the claims module's seed-range rules, from 2026-11-21 to 2026-11-28): a run failed only by the training
health rule (repro/train/health.py); a comparison held when the seed ranges of two cells with two or more seeds
each lay apart; a failure claim held when a majority of two or more seeds failed.

Rules v2 (2026-11-29), adding to the health rule:
- Learned nothing is a failure. A completed run fails when it is not clearly better than its corpus's trivial
  references (repro/references.py): its NLL must lie at least NLL_MARGIN nats under the unigram model's (the
  validation NLL of a sequence-to-sequence model; the test perplexity of a language model, as a log), and its
  headline metric at least METRIC_MARGIN points better than the best constant output's. A sequence-to-sequence
  run whose evaluation measured it must also use its source: its validation NLL with sources shuffled across the
  batch must exceed its own by at least NLL_MARGIN nats.
  Why these margins: 0.1 nats is a 10% lower perplexity, a bar any model that learned from context clears many
  times over (a trained mini model lies 3-4 nats under its unigram), while a model that only learned token
  frequencies lies within a few hundredths of it; 1 point of BLEU, ROUGE-1 or WER is several times the sampling
  spread of a score near zero on test sets of 500-1,000 sentences.
- Comparisons by a stated test. A directional claim: Welch's t-test on the seeds that trained, one-sided at ALPHA,
  with the difference of means and its 95% interval; "reproduced" when it is significant in the paper's direction,
  "not reproduced" when significant against it, otherwise "inconclusive" with the smallest difference the seeds
  could detect and the seeds per cell that would detect the paper's own difference with POWER. An equivalence
  claim: two one-sided Welch tests at the claim's margin (TOST). A failure claim: at least MIN_SEEDS_FAILURE seeds,
  decided by the majority. A cell with a majority of failed seeds (at least MIN_SEEDS_FAILURE) has failed as a
  whole: a method that failed never beats one that trained. A claim that one cell beats several holds when every
  comparison holds (an intersection-union test, valid at ALPHA without correction).

Added 2026-12-01, planning only (it asks for runs and judges none): an equivalence claim TOST cannot decide states
the seeds per cell that would show equivalence with POWER were the true difference the paper's
(seeds_needed_equivalence), as a directional one states the seeds that would detect it.

Rules v3 (2026-12-03; repro/claims_v3.py applies them), changing v2 where it could not say what a reader needs or
asked for more than any budget:
- Planned looks. A comparison is tested when its cells reach LOOKS seeds (3, 5, 10, then SEED_CAP), each look at
  the nominal one-sided level LOOK_ALPHA, a Pocock-type boundary that keeps the chance of a false "reproduced"
  over all four looks at ALPHA (look_alpha computes it; normal approximation with the looks' information
  fractions). Fewer than the first look's seeds: no test. A claim says its look.
- The paper's effect ruled out. Where the paper's own difference E (carried to the scale as v2 carries it) is
  positive and the one-sided bound of the difference lies under it (p_smaller < LOOK_ALPHA), the verdict is
  "smaller than the paper's", its sign said separately (in the paper's direction, against it, or no difference
  shown). "Inconclusive" is left for intervals that hold both zero and E.
- A budget cap. No claim asks for more than SEED_CAP seeds per cell: 20 seeds make a pair of cells 40 runs, the
  most one claim may take of a GPU session's grouped grid or of a fortnight of two CPU cores. The power rule uses
  each cell's spread at its one-sided SD_CONFIDENCE upper confidence bound (chi-square), not a point estimate
  from three seeds, Welch's degrees of freedom, and LOOK_ALPHA. An inconclusive claim whose effect needs more than
  the cap is "not decidable at this scale", with the number it would need, and asks for no runs.
- Several comparisons in one claim (B2T against each of several methods): each has its verdict; "against" and
  "smaller" are Holm-adjusted within the claim (one comparison going against B2T by chance no longer settles
  it); the claim is reproduced when every comparison is (an intersection-union test, valid uncorrected).
- Failed seeds count. In a comparison, a seed that failed scores its corpus's trivial reference (the constant
  output's BLEU, ROUGE-1 or WER; the unigram model's perplexity), so a method that fails on some seeds pays for
  them; a cell that failed on most seeds still settles the comparison as in v2.
- One model-code version per comparison (repro/model/version.py): the newest version at which every cell of the
  claim has the first look's seeds; older seeds are left out and said, with the way their difference leans. Where
  no version has them, the claim uses all and says it mixes.
- Across a table's claims, Holm- and Benjamini-Hochberg-adjusted p values are shown beside the raw ones; verdicts
  do not use them.

Rules v4 (2026-12-05), changing v3 where its looks were not the planned ones: a look tests exactly its planned
seeds, each cell's first LOOKS[k] scored seeds by seed number (at the claim's model-code version); seeds past the
look wait for the next. v3 tested all the seeds there were whenever the fewer reached a look, so every record that
landed between two looks (6 vs 5 seeds, then 7 vs 5, ...) was one more test at LOOK_ALPHA, and the Pocock-type
level no longer held the chance of a false "reproduced" at ALPHA over the four looks. Everything else is v3's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from repro.config import RecipeError, resolve
from repro.references import load_references
from repro.results import current_records, load_records, metric_at, recipes_dir

RULES = {"v1": "2026-11-21", "v2": "2026-11-29", "v3": "2026-12-03", "v4": "2026-12-05"}  # -> the date it took effect
CURRENT = "v4"
LOOKED = ("v3", "v4")  # the versions with planned looks (repro/claims_v3.py applies both)

NLL_MARGIN = 0.1        # nats under the unigram reference, and over the source-blind NLL
METRIC_MARGIN = 1.0     # points (BLEU, ROUGE-1 x 100, WER %) beyond the best constant output
ALPHA = 0.05            # one-sided
POWER = 0.8
MIN_SEEDS_FAILURE = 3   # seeds a failure (or a "trains") claim needs, and a cell needs to count as failed
MIN_SEEDS_TEST = 2      # trained seeds per cell a t-test needs (a spread needs two)


# -- learned nothing -------------------------------------------------------------------------------------------

def headline(task: str, metrics: dict) -> tuple[str, float | None, str | None]:
    """(label, value, split) of the metric a run is judged on against the constant output: the average BLEU over
    the test sets (split None), test ROUGE-1, the WER of test-other (paper scale) or of the one test set (mini)."""
    splits = metrics.get("splits") or {}
    if task == "mt":
        return "BLEU", metrics.get("bleu_average"), None
    if task == "summarization":
        return "ROUGE-1", metric_at(splits, ("test", "rouge1")), "test"
    if task == "asr":
        split = next((s for s in ("test-other", "test") if "wer" in (splits.get(s) or {})), None)
        return f"{split} WER", metric_at(splits, (split, "wer")) if split else None, split
    return "test perplexity", metric_at(splits, ("test", "perplexity")), "test"


def learned_nothing(record: dict, refs: dict | None) -> str | None:
    """Why a completed run counts as failed under rules v2 (None: it learned). Reads only the record and its
    corpus's references; a check whose number the record lacks is not applied."""
    m = record.get("metrics") or {}
    task = record.get("task")
    if refs is None or not m:
        return None
    uni = refs.get("unigram", {})
    if task == "lm":
        ppl, ref_ppl = metric_at(m, ("splits", "test", "perplexity")), metric_at(uni, ("perplexity", "test"))
        if ppl is not None and ref_ppl is not None and math.log(ppl) > math.log(ref_ppl) - NLL_MARGIN:
            return (f"learned nothing: test perplexity {ppl:.1f} is not {NLL_MARGIN:g} nats under a unigram model "
                    f"of the training text ({ref_ppl:.1f})")
        return None
    nll, ref_nll = m.get("valid_nll"), uni.get("valid_nll")
    if nll is not None and ref_nll is not None and nll > ref_nll - NLL_MARGIN:
        return (f"learned nothing: validation NLL {nll:.2f} is not {NLL_MARGIN:g} nats under a unigram model of the "
                f"training targets ({ref_nll:.2f})")
    const = refs.get("constant")
    name, value, split = headline(task, m)
    if const and value is not None:
        ref_value = const.get("bleu_average") if split is None else const["splits"].get(split)
        lower = task == "asr"
        worse = ref_value is not None and (value > ref_value - METRIC_MARGIN if lower
                                           else value < ref_value + METRIC_MARGIN)
        if worse:
            points = f"{METRIC_MARGIN:g} point{'s' * (METRIC_MARGIN != 1)}"
            than = f"{points} better than one constant output for every input ({ref_value:.2f}: \"{const['output']}\")"
            if nll is not None and ref_nll is not None:  # it learned its targets' language, not the task
                return (f"output no better than one constant sentence: {name} {value:.2f} is not {than}, though its "
                        f"validation NLL {nll:.2f} is under the unigram model's {ref_nll:.2f}")
            return f"learned nothing: {name} {value:.2f} is not {than}"
    blind = m.get("source_blind_nll")
    if blind is not None and nll is not None and blind < nll + NLL_MARGIN:
        return (f"ignores its input: validation NLL with sources shuffled across the batch is {blind:.2f}, within "
                f"{NLL_MARGIN:g} nats of its own {nll:.2f}")
    return None


# -- tests -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Welch:
    """Welch's t-test of mean(a) - mean(b), signed so that positive is the claimed direction."""
    diff: float
    ci95: tuple[float, float]
    t: float
    df: float
    p: float            # one-sided, in the claimed direction
    p_against: float    # one-sided, against it
    sd: float           # pooled seed SD, for the power figures
    se: float           # standard error of the difference
    n: tuple[int, int]

    def as_dict(self) -> dict:
        return {"test": "Welch t, one-sided", "diff": self.diff, "ci95": list(self.ci95),
                "t": self.t if math.isfinite(self.t) else None, "df": self.df,
                "p": self.p, "p_against": self.p_against, "n": list(self.n)}


def welch(a: list[float], b: list[float], sign: int = 1) -> Welch:
    """sign +1: the claim is mean(a) > mean(b); -1: mean(a) < mean(b). Needs two values a side."""
    from scipy import stats
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1)
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1)
    diff = sign * (ma - mb)
    se = math.sqrt(va / na + vb / nb)
    sd = math.sqrt(((na - 1) * va + (nb - 1) * vb) / (na + nb - 2))
    if se == 0:  # identical seeds on each side: the difference is exact
        p = 0.0 if diff > 0 else 1.0
        pa = 0.0 if diff < 0 else 1.0
        return Welch(diff, (diff, diff), math.copysign(math.inf, diff) if diff else 0.0, na + nb - 2, p, pa, sd, 0.0,
                     (na, nb))
    df = (va / na + vb / nb) ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    t = diff / se
    half = stats.t.ppf(0.975, df) * se
    return Welch(diff, (diff - half, diff + half), t, df, float(stats.t.sf(t, df)), float(stats.t.cdf(t, df)), sd,
                 se, (na, nb))


def tost(a: list[float], b: list[float], margin: float) -> dict:
    """Two one-sided Welch tests that |mean(a) - mean(b)| < margin: p is the larger of the two; `p_outside` the
    smaller one-sided p that the difference lies beyond the margin on its own side."""
    from scipy import stats
    w = welch(a, b)
    se = w.se
    if se == 0:
        inside = abs(w.diff) < margin
        return {"test": "TOST (two one-sided Welch t)", "diff": w.diff, "margin": margin, "p": 0.0 if inside else 1.0,
                "p_outside": 1.0 if inside else 0.0, "df": w.df, "ci90": [w.diff, w.diff], "n": list(w.n), "sd": w.sd}
    p_low = float(stats.t.sf((w.diff + margin) / se, w.df))     # H0: diff <= -margin
    p_high = float(stats.t.cdf((w.diff - margin) / se, w.df))   # H0: diff >= margin
    outside = float(stats.t.sf((abs(w.diff) - margin) / se, w.df))  # H0: |diff| <= margin, on the side it lies
    half = stats.t.ppf(0.95, w.df) * se
    return {"test": "TOST (two one-sided Welch t)", "diff": w.diff, "margin": margin, "p": max(p_low, p_high),
            "p_outside": outside, "df": w.df, "ci90": [w.diff - half, w.diff + half], "n": list(w.n), "sd": w.sd}


def detectable(sd: float, na: int, nb: int) -> float:
    """The smallest true difference a one-sided test at ALPHA detects with POWER, with these seeds and this SD."""
    from scipy import stats
    df = max(na + nb - 2, 1)
    return (stats.t.ppf(1 - ALPHA, df) + stats.t.ppf(POWER, df)) * sd * math.sqrt(1 / na + 1 / nb)


def seeds_needed(sd: float, effect: float, cap: int = 1000) -> int | None:
    """Seeds per cell (equal cells) for a one-sided test at ALPHA to detect `effect` with POWER; None when the
    effect is zero or the SD unknown, or more than `cap` would be needed."""
    if not effect or sd is None or not math.isfinite(sd):
        return None
    if sd == 0:
        return MIN_SEEDS_TEST
    for n in range(MIN_SEEDS_TEST, cap + 1):
        if detectable(sd, n, n) <= abs(effect):
            return n
    return None


def seeds_needed_equivalence(sd: float, diff: float, margin: float, cap: int = 1000) -> int | None:
    """Seeds per cell (equal cells) for the two one-sided tests at ALPHA to show |difference| < `margin` with POWER
    when the true difference is `diff` (2026-12-01, planning only: it asks for runs and judges none). The nearer
    bound decides (the usual approximation; at a difference of zero it asks a few seeds too few): its one-sided test
    must detect the gap margin - |diff|. None when that gap is not positive (equivalence is not expected), the SD
    unknown, or more than `cap` would be needed."""
    gap = margin - abs(diff)
    if gap <= 0 or sd is None or not math.isfinite(sd):
        return None
    return seeds_needed(sd, gap, cap)


# -- rules v3: planned looks, the paper's effect ruled out, a cap ------------------------------------------------

LOOKS = (3, 5, 10, 20)  # seeds per cell at which a comparison is tested
SEED_CAP = LOOKS[-1]
LOOK_ALPHA = 0.0174     # one-sided level at each look: look_alpha(LOOKS, ALPHA), stated here so that it is data
SD_CONFIDENCE = 0.8     # the power rule's spread: each cell's SD at this one-sided upper confidence bound


def look_alpha(looks: tuple[int, ...] = LOOKS, alpha: float = ALPHA) -> float:
    """The one nominal one-sided level that, used at every look, keeps the chance that any look rejects a true
    null at `alpha` (Pocock's constant for these information fractions, under the normal approximation: the look
    statistics Z_i, Z_j correlate as sqrt(n_i / n_j))."""
    import numpy as np
    from scipy.optimize import brentq
    from scipy.stats import multivariate_normal, norm
    cov = np.array([[math.sqrt(min(a, b) / max(a, b)) for b in looks] for a in looks])
    dist = multivariate_normal(mean=np.zeros(len(looks)), cov=cov, seed=0)
    c = brentq(lambda x: dist.cdf(np.full(len(looks), x)) - (1 - alpha), 1.0, 4.0, xtol=1e-4)
    return float(norm.sf(c))


def look_of(n: int) -> int:
    """How many of the planned looks `n` seeds per cell have reached (0: not yet the first)."""
    return sum(n >= k for k in LOOKS)


def variance_upper(values: list[float]) -> float:
    """A cell's seed variance at its one-sided SD_CONFIDENCE upper confidence bound (chi-square, n - 1 df)."""
    from scipy import stats
    n = len(values)
    m = sum(values) / n
    var = sum((x - m) ** 2 for x in values) / (n - 1)
    return var * (n - 1) / stats.chi2.ppf(1 - SD_CONFIDENCE, n - 1)


def detectable_welch(va: float, vb: float, n: int, alpha: float = LOOK_ALPHA) -> float:
    """The smallest true difference a one-sided Welch test at `alpha` detects with POWER, n seeds in each cell."""
    from scipy import stats
    if va + vb == 0:
        return 0.0
    df = (va + vb) ** 2 * (n - 1) / (va ** 2 + vb ** 2)
    return (stats.t.ppf(1 - alpha, df) + stats.t.ppf(POWER, df)) * math.sqrt((va + vb) / n)


def seeds_needed_v3(a: list[float], b: list[float], effect: float | None, cap: int = SEED_CAP,
                    alpha: float = LOOK_ALPHA) -> tuple[int | None, int | None]:
    """(seeds per cell to detect `effect` with POWER at `alpha` from the cells' upper-bound spreads, that number
    when it exceeds `cap`): one of the two is None; both are None when the effect is not positive."""
    if effect is None or effect <= 0:
        return None, None
    va, vb = variance_upper(a), variance_upper(b)
    for n in range(MIN_SEEDS_TEST, 1001):
        if detectable_welch(va, vb, n, alpha) <= effect:
            return (n, None) if n <= cap else (None, n)
    return None, 1001


def p_smaller(w: Welch, effect: float) -> float:
    """One-sided p that the true difference is as large as `effect` (small: the paper's effect is ruled out)."""
    from scipy import stats
    if w.se == 0:
        return 0.0 if w.diff < effect else 1.0
    return float(stats.t.cdf((w.diff - effect) / w.se, w.df))


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the order given."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def benjamini_hochberg(ps: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p values (false discovery rate), in the order given."""
    order = sorted(range(len(ps)), key=lambda i: ps[i], reverse=True)
    out, running = [0.0] * len(ps), 1.0
    for rank, i in enumerate(order):
        running = min(running, ps[i] * len(ps) / (len(ps) - rank))
        out[i] = running
    return out


# -- records under a version of the rules -----------------------------------------------------------------------

def judge_record(record: dict, refs: dict | None, rules: str = CURRENT) -> tuple[str, str]:
    """(status, reason) of one record under `rules`: v1 keeps the health rule's; v2 (and v3, v4) add learned
    nothing."""
    if rules not in RULES:
        raise ValueError(f"--rules {rules!r}: expected one of {', '.join(RULES)}")
    status, reason = record.get("status"), record.get("reason", "")
    if rules == "v1" or status != "completed":
        return status, reason
    why = learned_nothing(record, refs)
    return ("failed", why) if why else (status, reason)


def references_for(record: dict, references: dict) -> dict | None:
    """A record's corpus references: those of the corpus it trained on, by its fingerprint; else those of its
    corpus's name as prepared here. The references read only the target side of a corpus (its target text, token
    ids and vocabulary), which preparation makes from the shared text deterministically; what differs between
    machines is the source side of the speech corpus (espeak-ng's audio), and records of before fingerprints were
    kept have none to match."""
    data = record.get("data") or {}
    if (data.get("corpus"), data.get("files_sha256")) in references:
        return references[data["corpus"], data["files_sha256"]]
    corpus = data.get("corpus") or _recipe_corpus(record.get("recipe_name", ""), record.get("scale", ""))
    found = [ref for (name, _), ref in references.items() if name == corpus]
    return found[0] if len(found) == 1 else None


_CORPUS: dict[tuple[str, str], str | None] = {}


def _recipe_corpus(recipe_name: str, scale: str) -> str | None:
    if (recipe_name, scale) not in _CORPUS:
        try:
            _CORPUS[recipe_name, scale] = resolve(recipes_dir() / f"{recipe_name}.yaml", scale).recipe.data.corpus
        except RecipeError:
            _CORPUS[recipe_name, scale] = None
    return _CORPUS[recipe_name, scale]


def judged_overrides(results_dir, scale: str, sets: list[str] | None = None) -> dict[str, list[dict]]:
    """The records of runs with `--set` overrides (recipe name -> records), judged as judged_records judges: with
    `sets`, only those of each recipe as those overrides resolve it (its hash), else every one."""
    references = load_references(results_dir)
    hashes: dict[str, str | None] = {}
    out: dict[str, list[dict]] = {}
    for r in load_records(results_dir, scale):
        if not r.get("overrides"):
            continue
        name = r["recipe_name"]
        if sets is not None:
            if name not in hashes:
                try:
                    hashes[name] = resolve(recipes_dir() / f"{name}.yaml", scale, list(sets)).hash()
                except RecipeError:
                    hashes[name] = None
            if r.get("recipe_hash") != hashes[name]:
                continue
        out.setdefault(name, []).append(judged(r, references))
    return out


def judged(record: dict, references: dict, rules: str = CURRENT) -> dict:
    """A copy of `record` whose status and reason are the rules' (the health rule's own kept as `health_status`)."""
    status, reason = judge_record(record, references_for(record, references), rules)
    return {**record, "health_status": record.get("status"), "status": status, "reason": reason}


def judged_records(results_dir, scale: str,
                   rules: str = CURRENT) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """`repro.results.current_records`, each record a copy whose status and reason are the rules' (the health
    rule's own kept as `health_status`)."""
    current, stale = current_records(results_dir, scale)
    references = load_references(results_dir) if rules != "v1" else {}
    out = {}
    for name, recs in current.items():
        out[name] = [judged(r, references, rules) for r in recs]
    return out, stale
