"""`lnrepro prepare DATASET`: which module prepares each dataset, at which vocabulary size by default."""

from __future__ import annotations

from pathlib import Path

DATASETS = ("wmt", "wmt-sample", "multi30k", "gigaword", "wikitext103", "librispeech", "speech-mini", "tiny")


def prepare(dataset: str, root: Path, source: Path | None, vocab_size: int | None) -> str:
    """`lnrepro prepare DATASET`: download (or read from `source`), preprocess and binarize a corpus into `root`, at
    the paper's vocabulary size unless `vocab_size` says; returns what was prepared, in a line."""
    if dataset not in DATASETS:
        raise ValueError(f"prepare {dataset!r}: unknown dataset (expected one of {', '.join(DATASETS)})")
    if source is not None and not source.exists():
        raise ValueError(f"--source {source}: no such folder")
    if dataset == "tiny":
        from repro.data.tiny import ensure_tiny_corpora
        made = ensure_tiny_corpora(root, source)
        return (f"tiny corpora in {root}: {', '.join(made) or 'already prepared'}"
                + ("" if source else " (tiny_speech needs --source with a LibriSpeech/ folder)"))
    if dataset == "wmt":
        from repro.data.wmt import prepare_wmt
        meta = prepare_wmt(root, source, vocab_size or 32000)
    elif dataset == "wmt-sample":
        from repro.data.wmt import prepare_wmt_sample
        meta = prepare_wmt_sample(root, source, vocab_size or 8000)
    elif dataset == "multi30k":
        from repro.data.multi30k import prepare_multi30k
        meta = prepare_multi30k(root, source, vocab_size or 8000)
    elif dataset == "gigaword":
        from repro.data.gigaword import prepare_gigaword
        meta = prepare_gigaword(root, source, vocab_size)
    elif dataset == "wikitext103":
        from repro.data.wikitext import prepare_wikitext103
        meta = prepare_wikitext103(root, source)
    elif dataset == "librispeech":
        from repro.data.librispeech import prepare_librispeech
        meta = prepare_librispeech(root, source, vocab_size or 10000)
    else:
        from repro.data.speech_mini import prepare_speech_mini
        meta = prepare_speech_mini(root, source, vocab_size or 1000)
    return f"prepared {meta['corpus']} in {root / meta['corpus']} (vocabulary {meta['vocab_size']:,})"
