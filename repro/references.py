"""Trivial references of a prepared corpus, computed from the corpus alone (never from a run): what a model that
learned nothing of its task already scores. The judging rules (repro/judging.py) fail a run that does not beat them.

- Unigram: a model of the training targets' token frequencies (add-one smoothed over the output vocabulary, so
  every token has a probability), scored as the runs are: mean NLL per target token in nats, end-of-sentence
  included, on the validation split; for the language model also the perplexity of every evaluated split.
- Constant output (sequence-to-sequence tasks): the one training target that, output for every source, scores best
  on the validation split by the task's metric (BLEU, ROUGE-1, WER; for WER the empty output is a candidate too),
  and its score on every test split with the same metric functions `lnrepro evaluate` uses. Every distinct
  training target is a candidate: BLEU and ROUGE-1 of a constant output are computed exactly from reference n-gram
  tables, WER with a lower bound that skips a candidate only when it cannot win; the chosen output is then scored
  by the metric functions themselves.

`lnrepro references CORPUS --root DIR` writes results/references/<corpus>.json with the corpus fingerprint; the
rules read a record's references by the fingerprint it trained on.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np

from repro.data.binarized import TokenArray
from repro.data.text import EOS, corpus_fingerprint, read_meta
from repro.data.wikitext import stream
from repro.eval import metrics
from repro.files import atomic_write_text
from repro.results import RESULTS_DIR

REFERENCES = "references"


def references_path(results_dir: Path, corpus: str) -> Path:
    return Path(results_dir) / REFERENCES / f"{corpus}.json"


def load_references(results_dir: Path = RESULTS_DIR) -> dict[tuple[str, str], dict]:
    """(corpus, files_sha256) -> references, for every committed references file."""
    out = {}
    for p in sorted((Path(results_dir) / REFERENCES).glob("*.json")):
        ref = json.loads(p.read_text(encoding="utf-8"))
        out[(ref["data"]["corpus"], ref["data"]["files_sha256"])] = ref
    return out


# -- unigram ---------------------------------------------------------------------------------------------------

def unigram_nll(train: np.ndarray, evaluated: np.ndarray, vocab_size: int) -> float:
    """Mean NLL (nats) of `evaluated` token ids under add-one smoothed unigram frequencies of `train`."""
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts) - math.log(counts.sum())
    return float(-logp[evaluated].mean())


def _targets(corpus_dir: Path, split: str) -> np.ndarray:
    """Every target token id of a split as the model predicts them: each sentence's ids, then end-of-sentence."""
    arr = TokenArray(corpus_dir / f"{split}.tgt")
    return np.concatenate([np.append(arr[i], EOS) for i in range(len(arr))])


# -- constant output -------------------------------------------------------------------------------------------

def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def best_constant_bleu(candidates: list[str], references: list[str]) -> str:
    """The candidate with the highest corpus BLEU when output for every reference (sacrebleu's 13a tokens and
    statistics; exact): for each n-gram, how many references hold it at least k times gives the clipped matches
    of a constant output without scoring it against each reference."""
    from sacrebleu.metrics import BLEU
    tok = BLEU(tokenize="13a").tokenizer
    at_least: dict[tuple, list[int]] = {}
    ref_len = 0
    for ref in references:
        words = tok(ref.rstrip()).split()
        ref_len += len(words)
        for n in range(1, 5):
            for g, c in _ngrams(words, n).items():
                hist = at_least.setdefault(g, [])
                hist.extend([0] * (c - len(hist)))
                for k in range(c):
                    hist[k] += 1
    best, best_score = "", -1.0
    for cand in candidates:
        words = tok(cand.rstrip()).split()
        correct, total = [0] * 4, [0] * 4
        for n in range(1, 5):
            for g, c in _ngrams(words, n).items():
                hist = at_least.get(g, ())
                correct[n - 1] += sum(hist[:c])
            total[n - 1] = max(len(words) - n + 1, 0) * len(references)
        score = BLEU.compute_bleu(correct, total, len(words) * len(references), ref_len, smooth_method="exp").score
        if score > best_score:
            best, best_score = cand, score
    return best


def best_constant_rouge1(candidates: list[str], references: list[str]) -> str:
    """The candidate with the highest mean ROUGE-1 F1 over the references (rouge-score's tokens and stemming;
    exact): F1 of one pair is 2 * overlap / (hypothesis words + reference words)."""
    from rouge_score import rouge_scorer
    tokenize = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)._tokenizer.tokenize
    ref_tokens = [Counter(tokenize(r)) for r in references]
    vocab = {w: i for i, w in enumerate(sorted({w for c in ref_tokens for w in c}))}
    table = np.zeros((len(references), len(vocab)), dtype=np.int32)
    for i, c in enumerate(ref_tokens):
        for w, k in c.items():
            table[i, vocab[w]] = k
    ref_len = table.sum(1)
    best, best_score = "", -1.0
    for cand in candidates:
        c = Counter(tokenize(cand))
        known = [(vocab[w], k) for w, k in c.items() if w in vocab]
        n = sum(c.values())
        if not n:
            continue
        overlap = (np.minimum(table[:, [i for i, _ in known]], [k for _, k in known]).sum(1) if known
                   else np.zeros(len(references)))
        score = float(np.mean(2.0 * overlap / (n + ref_len)))
        if score > best_score:
            best, best_score = cand, score
    return best


def best_constant_wer(candidates: list[str], references: list[str]) -> str:
    """The candidate (the empty output among them) with the lowest WER over the references. Edit distance is at
    least max(|h|, |r|) minus the words the two share, so a candidate whose bound over all references cannot beat
    the best so far is skipped unscored; the result is exact."""
    refs = [metrics.normalize_transcript(r) for r in references]
    ref_counts = [Counter(r) for r in refs]
    best, best_errors = "", sum(len(r) for r in refs)  # the empty output: every reference word deleted
    for cand in candidates:
        h = metrics.normalize_transcript(cand)
        hc = Counter(h)
        bound = sum(max(len(h), len(r)) - sum(min(k, rc[w]) for w, k in hc.items()) for r, rc in zip(refs, ref_counts))
        if bound >= best_errors:
            continue
        errors = 0
        for r in refs:
            errors += metrics.edit_distance(h, r)
            if errors >= best_errors:
                break
        if errors < best_errors:
            best, best_errors = cand, errors
    return best


# -- per corpus ------------------------------------------------------------------------------------------------

def _score(kind: str, hyp: str, refs: list[str]) -> float:
    hyps = [hyp] * len(refs)
    if kind == "mt":
        return metrics.bleu(hyps, refs)[0]
    if kind == "summarization":
        return metrics.rouge(hyps, refs)["rouge1"]
    return metrics.wer(hyps, refs)


CHOOSE = {"mt": best_constant_bleu, "summarization": best_constant_rouge1, "asr": best_constant_wer}
METRIC_NAME = {"mt": "bleu", "summarization": "rouge1", "asr": "wer"}


def compute_references(corpus_dir: Path, task: str, valid_split: str, test_splits: list[str]) -> dict:
    """The references of one prepared corpus for one task (its splits as a recipe names them)."""
    corpus_dir = Path(corpus_dir)
    meta = read_meta(corpus_dir)
    vocab = int(meta["vocab_size"])
    out = {"data": corpus_fingerprint(corpus_dir.name, meta), "task": task, "vocab_size": vocab,
           "valid_split": valid_split}
    if task == "lm":
        train = stream(corpus_dir, "train")
        out["unigram"] = {"perplexity": {s: math.exp(unigram_nll(train, stream(corpus_dir, s), vocab))
                                         for s in [valid_split, *test_splits]}}
        out["unigram"]["valid_nll"] = math.log(out["unigram"]["perplexity"][valid_split])
        return out
    train = _targets(corpus_dir, "train")
    out["unigram"] = {"valid_nll": unigram_nll(train, _targets(corpus_dir, valid_split), vocab)}
    train_text = corpus_dir / ("train.raw.tgt" if (corpus_dir / "train.raw.tgt").is_file() else "train.tgt.txt")
    counts = Counter(train_text.read_text(encoding="utf-8").splitlines())
    candidates = sorted(counts, key=lambda t: (-counts[t], t))  # most frequent first: ties go to the common one
    valid_refs = (corpus_dir / f"{valid_split}.tgt.txt").read_text(encoding="utf-8").splitlines()
    output = CHOOSE[task](candidates, valid_refs)
    splits = {s: _score(task, output, (corpus_dir / f"{s}.tgt.txt").read_text(encoding="utf-8").splitlines())
              for s in [valid_split, *test_splits]}
    out["constant"] = {"output": output, "metric": METRIC_NAME[task], "candidates": len(candidates),
                       "splits": splits}
    if task == "mt":
        out["constant"]["bleu_average"] = float(np.mean([splits[s] for s in test_splits]))
    return out


def write_references(corpus_dir: Path, task: str, valid_split: str, test_splits: list[str],
                     results_dir: Path = RESULTS_DIR) -> Path:
    ref = compute_references(corpus_dir, task, valid_split, test_splits)
    path = references_path(results_dir, ref["data"]["corpus"])
    atomic_write_text(path, json.dumps(ref, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return path
