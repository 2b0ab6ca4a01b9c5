"""Prepare a parallel corpus (MT, headline generation): clean, one joint SentencePiece model, binarize.

Built in <corpus>.partial/ (each step is skipped when its output already exists, so an interrupted prepare
resumes) and renamed into place when complete (repro/data/text.py: begin_prepare, finish_prepare). Layout:

    train.raw.{src,tgt}     cleaned training text
    spm.model / spm.vocab   joint SentencePiece model (shared source/target vocabulary)
    <split>.{src,tgt}.txt   raw text of every split (references are scored against these)
    <split>.{src,tgt}.bin/.idx  token ids
    meta.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

import sentencepiece as spm

from repro.data.text import (begin_prepare, encode_file, finish_prepare, read_meta, train_sentencepiece,
                             write_lines_atomic)
from repro.progress import console


def clean_pairs(pairs: Iterable[tuple[str, str]], min_len: int = 1, max_len: int = 80,
                ratio: float = 1.5) -> Iterator[tuple[str, str]]:
    """Moses clean-corpus-n's rule on whitespace words: both sides 1..80 words, length ratio at most 1.5."""
    for src, tgt in pairs:
        src, tgt = " ".join(src.split()), " ".join(tgt.split())
        ns, nt = len(src.split()), len(tgt.split())
        if not (min_len <= ns <= max_len and min_len <= nt <= max_len):
            continue
        if ns > ratio * nt or nt > ratio * ns:
            continue
        yield src, tgt


def _write_pairs(out_dir: Path, name: str, pairs: Iterable[tuple[str, str]]) -> int:
    src_tmp, tgt_tmp = out_dir / f"{name}.src.tmp", out_dir / f"{name}.tgt.tmp"
    n = 0
    with open(src_tmp, "w", encoding="utf-8") as fs, open(tgt_tmp, "w", encoding="utf-8") as ft:
        for s, t in pairs:
            fs.write(s + "\n")
            ft.write(t + "\n")
            n += 1
    src_tmp.replace(out_dir / f"{name}.src")
    tgt_tmp.replace(out_dir / f"{name}.tgt")
    return n


def prepare_parallel(out_dir: Path, corpus: str, train_pairs: Iterable[tuple[str, str]],
                     eval_splits: dict[str, tuple[list[str], list[str]]], vocab_size: int,
                     langs: tuple[str, str], provenance: dict, clean: bool = True,
                     model_type: str = "bpe", max_sentences: int = 2_000_000) -> dict:
    """train_pairs: an iterator (streamed once). eval_splits: name -> (source lines, reference lines).

    SentencePiece learns from a uniform sample of at most max_sentences training lines, which bounds memory
    whatever the corpus size."""
    final_dir = out_dir
    inputs = {"corpus": corpus, "vocab_size": vocab_size, "model_type": model_type, "clean": clean,
              "provenance": provenance}
    out_dir, done = begin_prepare(final_dir, inputs)
    if done:
        console.print(f"[{corpus}] already prepared from these inputs in {final_dir}")
        return read_meta(final_dir)
    if not (out_dir / "train.raw.src").is_file():
        console.print(f"[{corpus}] cleaning and writing training pairs")
        n = _write_pairs(out_dir, "train.raw", clean_pairs(train_pairs) if clean else train_pairs)
        console.print(f"[{corpus}] {n:,} training pairs kept")
    model = out_dir / "spm.model"
    if not model.is_file():
        console.print(f"[{corpus}] training SentencePiece {model_type} ({vocab_size:,} pieces, joint)")
        train_sentencepiece([out_dir / "train.raw.src", out_dir / "train.raw.tgt"], out_dir / "spm",
                            vocab_size, model_type, max_sentences=max_sentences)
    for name, (src, ref) in eval_splits.items():
        if len(src) != len(ref):
            raise ValueError(f"{corpus} {name}: {len(src)} source lines but {len(ref)} references")
        if not src:
            raise ValueError(f"{corpus} {name}: the split is empty (no sentence to validate or score)")
        write_lines_atomic(out_dir / f"{name}.src.txt", src)
        write_lines_atomic(out_dir / f"{name}.tgt.txt", ref)
    for name in ["train", *eval_splits]:
        for side in ("src", "tgt"):
            text = out_dir / (f"train.raw.{side}" if name == "train" else f"{name}.{side}.txt")
            prefix = out_dir / f"{name}.{side}"
            if not prefix.with_name(prefix.name + ".idx").is_file():
                encode_file(model, text, prefix, description=f"{corpus} {name}.{side}")
    meta = {"corpus": corpus, "kind": "parallel", "source_lang": langs[0], "target_lang": langs[1],
            "spm_model": "spm.model", "vocab_size": spm.SentencePieceProcessor(model_file=str(model)).get_piece_size(), "model_type": model_type,
            "splits": sorted(["train", *eval_splits]), "provenance": provenance}
    return finish_prepare(out_dir, final_dir, meta, inputs)
