"""Shared text steps: SentencePiece training, parallel encoding into binarized arrays, prepared-corpus metadata.

Token ids follow fairseq's convention: <s>=0, <pad>=1, </s>=2, <unk>=3.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import random
import multiprocessing
from pathlib import Path
from typing import Iterable, Iterator

import sentencepiece as spm

from repro.checksum import sha256_file
from repro.data.binarized import TokenArrayWriter
from repro.data.corpora import prepare_command
from repro.progress import progress_bar
from repro.files import atomic_write_text

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
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


# -- a prepared corpus is built in <name>.partial/ and completed by one rename ----------------------------------

def split_lines(text: str) -> list[str]:
    """A text's lines, split at "\n" alone (a Windows "\r\n" ending dropped): never at a form feed, a lone "\r"
    or U+2028 inside a sentence, as str.splitlines and universal newlines would, which misaligns a parallel corpus."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_lines(path: Path) -> list[str]:
    """A UTF-8 file's lines (split_lines)."""
    return split_lines(Path(path).read_bytes().decode("utf-8"))


def paired(src: Iterable[str], tgt: Iterable[str], where: str) -> Iterator[tuple[str, str]]:
    """The two sides of a parallel corpus, line by line; a side that ends first is a PrepareError naming `where`
    (raised before the corpus is renamed into place: nothing half-made is left)."""
    try:
        yield from zip(src, tgt, strict=True)
    except ValueError:
        raise PrepareError(f"{where}: the two sides have different numbers of lines") from None


CHECKSUM_LIMIT = 16 << 20  # corpora prepared before every file got a SHA-256 have them up to this size only


def corpus_fingerprint(corpus: str, meta: dict) -> dict:
    """The prepared corpus a run trained on: its name and a hash of meta.json's file list (names, sizes, and the
    checksums it keeps for files up to 16 MB), so one corpus prepared from two paths gives one fingerprint. Left
    out: meta.json's source path, and spm.model, whose trainer settings name the path it was trained in (its
    pieces and scores are spm.vocab, which stays in)."""
    # the checksums of files up to 16 MB only, as before every file had one: a corpus prepared then or now from
    # the same inputs keeps one fingerprint
    kept = {name: {k: v for k, v in facts.items() if k != "sha256" or facts.get("bytes", 0) <= CHECKSUM_LIMIT}
            for name, facts in (meta.get("files") or {}).items() if name != "spm.model"}
    files = json.dumps(kept, sort_keys=True)
    return {"corpus": corpus, "files_sha256": hashlib.sha256(files.encode()).hexdigest()[:16]}


def _prepare_hint(corpus_dir: Path) -> str:
    return f"run `{prepare_command(Path(corpus_dir).name)}` again"


def file_facts(path: Path) -> dict:
    """A prepared file's size and SHA-256 (about 1 GB/s: a WMT-sized corpus checks in about a second)."""
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


_VERIFIED: set[tuple[str, int, int]] = set()  # (file, size, mtime): checked once per process


def _token_file(name: str) -> bool:
    """Whether a prepared file holds token ids (int32): the .bin files but speech features."""
    return name.endswith(".bin") and not name.endswith(".feats.bin")


_BUILD_LOCKS: dict[str, object] = {}  # corpus folder -> its open lock file, held from begin to finish


def _lock_build(out_dir: Path) -> None:
    """One process builds a corpus at a time (two trainings or prepares started at once on a fresh --root):
    an exclusive lock on <corpus>.lock beside it, released by finish_prepare, or when the process ends."""
    import fcntl
    key = str(out_dir.resolve())
    if key in _BUILD_LOCKS:
        return
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    f = open(out_dir.with_name(out_dir.name + ".lock"), "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        from repro.progress import console
        console.print(f"{out_dir.name}: another process is preparing it; waiting for it to finish")
        fcntl.flock(f, fcntl.LOCK_EX)
    _BUILD_LOCKS[key] = f


def _unlock_build(out_dir: Path) -> None:
    f = _BUILD_LOCKS.pop(str(Path(out_dir).resolve()), None)
    if f is not None:
        f.close()  # closing releases the lock


def begin_prepare(out_dir: Path, inputs: dict) -> tuple[Path, bool]:
    """Where to build a corpus made from `inputs`, and whether `out_dir` already holds exactly that corpus.

    A complete corpus of other inputs (another --source or --vocab-size) is rebuilt beside it and replaced only
    when the new one is complete. An interrupted build resumes when its inputs match, and starts over otherwise."""
    out_dir = Path(out_dir)
    _lock_build(out_dir)  # a second process preparing the same corpus waits here, then finds it prepared
    meta_path = out_dir / "meta.json"
    if meta_path.is_file():
        try:
            meta = read_meta(out_dir)
            if meta.get("inputs") == inputs:
                _unlock_build(out_dir)
                return out_dir, True
        except PrepareError:
            pass  # damaged: rebuild
    partial = out_dir.with_name(out_dir.name + ".partial")
    recorded = partial / "inputs.json"
    if partial.is_dir() and (not recorded.is_file() or _load_json(recorded) != inputs):
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    if not recorded.is_file():
        write_json_atomic(recorded, inputs)
    return partial, False


def finish_prepare(partial: Path, out_dir: Path, meta: dict, inputs: dict) -> dict:
    """Record every file's size (and small files' checksums) in meta.json, then swap the build into place."""
    files = {p.name: file_facts(p) for p in sorted(partial.iterdir())
             if p.is_file() and p.name not in ("meta.json", "inputs.json") and not p.name.endswith(".tmp")}
    meta = {**meta, "inputs": inputs, "files": files}
    write_json_atomic(partial / "meta.json", meta)
    old = out_dir.with_name(out_dir.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(partial, out_dir)  # the one step that makes the new corpus the prepared one
    shutil.rmtree(old, ignore_errors=True)
    _unlock_build(out_dir)
    return meta


def _load_json(path: Path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def read_meta(corpus_dir: Path, verify: bool = True) -> dict:
    """The corpus's meta.json, after checking that every file it lists is there with its recorded size (and
    checksum, for small files); any fault is one line naming the file and the prepare command that fixes it."""
    corpus_dir = Path(corpus_dir)
    path = corpus_dir / "meta.json"
    if not path.is_file():
        raise PrepareError(f"{corpus_dir}: no prepared corpus here (meta.json missing); {_prepare_hint(corpus_dir)}"
                           if corpus_dir.with_name(corpus_dir.name + ".partial").exists() else
                           f"{corpus_dir}: no prepared corpus here (meta.json missing); "
                           f"run `{prepare_command(corpus_dir.name)}` first")
    meta = _load_json(path)
    if not isinstance(meta, dict) or "vocab_size" not in meta:
        raise PrepareError(f"{path}: not a prepared corpus's metadata (garbled); {_prepare_hint(corpus_dir)}")
    for name, facts in (meta.get("files") or {}).items() if verify else ():
        f = corpus_dir / name
        if not f.is_file() or f.stat().st_size != facts["bytes"]:
            found = f"{f.stat().st_size} bytes" if f.is_file() else "missing"
            raise PrepareError(f"{f}: {found}, expected {facts['bytes']} bytes (damaged or half-written); "
                               f"{_prepare_hint(corpus_dir)}")
        st = f.stat()
        key = (str(f.resolve()), st.st_size, st.st_mtime_ns)
        if key in _VERIFIED:
            continue
        if "sha256" in facts and sha256_file(f) != facts["sha256"]:
            raise PrepareError(f"{f}: its contents changed since it was prepared (checksum differs); "
                               f"{_prepare_hint(corpus_dir)}")
        if _token_file(name) and st.st_size:
            import numpy as np
            ids = np.memmap(f, dtype=np.int32, mode="r")
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= int(meta["vocab_size"]):
                raise PrepareError(f"{f}: token id {hi if hi >= int(meta['vocab_size']) else lo} lies outside the "
                                   f"vocabulary of {meta['vocab_size']}; {_prepare_hint(corpus_dir)}")
        _VERIFIED.add(key)
    return meta
