"""Shared text steps: SentencePiece training, parallel encoding into binarized arrays, prepared-corpus metadata.

Token ids follow fairseq's convention: <s>=0, <pad>=1, </s>=2, <unk>=3.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import multiprocessing
from pathlib import Path
from typing import Iterable, Iterator

import sentencepiece as spm

from repro.data.binarized import TokenArrayWriter
from repro.progress import progress_bar

BOS, PAD, EOS, UNK = 0, 1, 2, 3


class PrepareError(RuntimeError):
    """A prepare step that cannot go on; the message says what to do."""


def sample_lines(paths: list[Path], limit: int, seed: int = 1) -> list[str]:
    """Reservoir sample of at most `limit` non-empty lines over files, in bounded memory."""
    rng = random.Random(seed)
    sample: list[str] = []
    seen = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                seen += 1
                if len(sample) < limit:
                    sample.append(line)
                else:
                    j = rng.randrange(seen)
                    if j < limit:
                        sample[j] = line
    return sample


def train_sentencepiece(paths: list[Path], model_prefix: Path, vocab_size: int, model_type: str,
                        max_sentences: int = 10_000_000, character_coverage: float = 1.0) -> Path:
    """Train one SentencePiece model on the given text files (a sample of at most max_sentences lines)."""
    lines = sample_lines(paths, max_sentences)
    if not lines:
        raise PrepareError(f"no text to train SentencePiece on in {', '.join(map(str, paths))}")
    tmp_prefix = model_prefix.with_name(model_prefix.name + ".tmp")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(tmp_prefix), vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage,
        bos_id=BOS, pad_id=PAD, eos_id=EOS, unk_id=UNK, hard_vocab_limit=False,
        num_threads=os.cpu_count() or 1, minloglevel=2, train_extremely_large_corpus=False)
    for ext in (".model", ".vocab"):
        os.replace(str(tmp_prefix) + ext, str(model_prefix) + ext)
    return Path(str(model_prefix) + ".model")


_worker_sp: spm.SentencePieceProcessor | None = None


def _init_worker(model_path: str) -> None:
    global _worker_sp
    _worker_sp = spm.SentencePieceProcessor(model_file=model_path)


def _encode_chunk(lines: list[str]) -> list[list[int]]:
    return _worker_sp.encode([line.strip() for line in lines])


def _chunks(it: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(it)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def encode_file(model_path: Path, text_path: Path, out_prefix: Path, workers: int | None = None,
                description: str = "encode") -> int:
    """Encode a text file line by line (in parallel, streaming) into `out_prefix`.bin/.idx; returns the lines."""
    workers = workers or min(4, os.cpu_count() or 1)
    total = sum(1 for _ in open(text_path, encoding="utf-8"))
    n = 0
    with open(text_path, encoding="utf-8") as f, TokenArrayWriter(out_prefix) as writer, \
            progress_bar(description, total) as bar:
        chunks = _chunks(f, 2000)
        if workers > 1 and total > 20000:
            with multiprocessing.get_context("spawn").Pool(workers, initializer=_init_worker,
                                                      initargs=(str(model_path),)) as pool:
                for ids_list in pool.imap(_encode_chunk, chunks):
                    for ids in ids_list:
                        writer.add(ids)
                    n += len(ids_list)
                    bar.advance(len(ids_list))
        else:
            _init_worker(str(model_path))
            for chunk in chunks:
                for ids in _encode_chunk(chunk):
                    writer.add(ids)
                n += len(chunk)
                bar.advance(len(chunk))
    return n


def write_lines_atomic(path: Path, lines: Iterable[str]) -> int:
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line.rstrip("\n") + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def write_json_atomic(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_meta(corpus_dir: Path) -> dict:
    path = Path(corpus_dir) / "meta.json"
    if not path.is_file():
        raise PrepareError(f"{corpus_dir}: no prepared corpus here (meta.json missing); "
                           f"run `lnrepro prepare {Path(corpus_dir).name}` first")
    return json.loads(path.read_text())
