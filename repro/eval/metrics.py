"""Scores: SacreBLEU (MT), ROUGE F1 with rouge-score (summarisation), WER (ASR), perplexity (LM)."""

from __future__ import annotations

import math
import re

import sacrebleu


def check_counts(hypotheses: list[str], references: list[str]) -> None:
    """One hypothesis per reference, and at least one: a score of nothing would read as a result."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses against {len(references)} references: "
                         f"the two must have one line per sentence")
    if not references:
        raise ValueError("no sentences to score: the test split is empty")


def bleu(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    """Corpus BLEU and its signature, nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:… (the paper's)."""
    check_counts(hypotheses, references)
    metric = sacrebleu.metrics.BLEU(tokenize="13a", smooth_method="exp", lowercase=False, effective_order=False)
    score = metric.corpus_score(hypotheses, [references])
    return score.score, str(metric.get_signature())


ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def rouge(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """Mean ROUGE-1/2/L F1 x 100 over pairs. rouge-score's default tokeniser (lower-case, non-alphanumerics
    become spaces) with Porter stemming, as in the usual Gigaword evaluation (ROUGE-1.5.5 -m)."""
    check_counts(hypotheses, references)
    from rouge_score import rouge_scorer  # here, not at the top: scoring MT, LM or ASR needs no ROUGE package
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for hyp, ref in zip(hypotheses, references, strict=True):
        s = scorer.score(ref, hyp)
        for k in ROUGE_TYPES:
            totals[k] += s[k].fmeasure
    n = max(len(hypotheses), 1)
    return {k: 100.0 * v / n for k, v in totals.items()}


def normalize_transcript(text: str) -> list[str]:
    """The same normalisation on hypothesis and reference: lower-case, keep letters, digits and apostrophes."""
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def edit_distance(a: list[str], b: list[str]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def wer(hypotheses: list[str], references: list[str]) -> float:
    """Word error rate in percent: total word edits over total reference words."""
    check_counts(hypotheses, references)
    errors = words = 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        r = normalize_transcript(ref)
        errors += edit_distance(normalize_transcript(hyp), r)
        words += len(r)
    if not words:
        raise ValueError("the references hold no words: a word error rate of them means nothing")
    return 100.0 * errors / words


def perplexity(total_nll: float, n_tokens: int) -> float:
    return math.exp(total_nll / max(n_tokens, 1))
