"""WikiText-103 (Merity et al. 2017; paper 6.3): word-level vocabulary from train, binarized token streams.

Paper scale: the wikitext-103-v1 archive (wiki.{train,valid,test}.tokens), downloaded or from `--source` (the zip
or the extracted files). As in fairseq, every line (blank ones too) ends with </s>; the vocabulary is every train
word, most frequent first, after <s> <pad> </s> <unk> (about 267K types); words outside it read as <unk>.

Mini scale (shared/data/wikitext103 holds only valid and test): corpus `wikitext103_mini` trains on the first 90%
of the valid lines, validates on the last 10%, and reports test perplexity on the real test file; its vocabulary
comes from those training lines, so more test words are <unk> than at paper scale.
"""

from __future__ import annotations

import collections
import json
import zipfile
from pathlib import Path

import numpy as np

from repro.data.binarized import TokenArray, TokenArrayWriter
from repro.data.text import (BOS, EOS, PAD, UNK, PrepareError, begin_prepare, finish_prepare, read_meta,
                             read_lines, split_lines, write_json_atomic)
from repro.data.wmt import download
from repro.progress import console, progress_bar

URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip"
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def build_vocab(lines, min_count: int = 1) -> list[str]:
    counts = collections.Counter(w for line in lines for w in line.split())
    words = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS),
                   key=lambda w: (-counts[w], w))
    return SPECIALS + words


def binarize_lines(lines, vocab: dict[str, int], prefix: Path, description: str) -> int:
    n = 0
    with TokenArrayWriter(prefix) as w, progress_bar(description, None) as bar:
        for line in lines:
            w.add([vocab.get(t, UNK) for t in line.split()] + [EOS])
            n += 1
            bar.advance()
    return n


def prepare_lm_corpus(out_dir: Path, name: str, splits: dict[str, list[str]], provenance: dict) -> dict:
    """splits: train/valid/test -> lines. Vocabulary from train; each split one token stream (line per row)."""
    final_dir = out_dir
    inputs = {"corpus": name, "provenance": provenance, "lines": {k: len(v) for k, v in splits.items()}}
    out_dir, done = begin_prepare(final_dir, inputs)
    if done:
        return read_meta(final_dir)
    vocab_path = out_dir / "dict.json"
    if vocab_path.is_file():
        words = json.loads(vocab_path.read_text())
    else:
        words = build_vocab(splits["train"])
        write_json_atomic(vocab_path, words)
    index = {w: i for i, w in enumerate(words)}
    assert index["<s>"] == BOS and index["<pad>"] == PAD and index["</s>"] == EOS and index["<unk>"] == UNK
    for split, lines in splits.items():
        if not (out_dir / f"{split}.idx").is_file():
            binarize_lines(lines, index, out_dir / split, f"{name} {split}")
    meta = {"corpus": name, "kind": "lm", "vocab_size": len(words), "dict": "dict.json",
            "splits": sorted(splits), "provenance": provenance}
    return finish_prepare(out_dir, final_dir, meta, inputs)


def _read_split(source: Path, split: str) -> list[str] | None:
    for path in sorted(source.rglob(f"wiki.{split}.tokens")):
        return read_lines(path)
    for z in sorted(source.rglob("wikitext-103*.zip")):
        with zipfile.ZipFile(z) as f:
            names = [n for n in f.namelist() if n.endswith(f"wiki.{split}.tokens")]
            if names:
                return split_lines(f.read(names[0]).decode("utf-8"))
    return None


def prepare_wikitext103(root: Path, source: Path | None) -> dict:
    if source is None:
        zip_path = download(URL, root / "downloads" / "wikitext-103-v1.zip")
        source = zip_path.parent
    found = {s: _read_split(source, s) for s in ("train", "valid", "test")}
    if found["valid"] is None or found["test"] is None:
        raise PrepareError(f"--source {source}: wiki.valid.tokens / wiki.test.tokens not found")
    if found["train"] is not None:
        return prepare_lm_corpus(root / "wikitext103", "wikitext103", found, {"source": str(source)})
    cut = int(len(found["valid"]) * 0.9)
    console.print("no wiki.train.tokens in --source: preparing wikitext103_mini (train = valid[:90%], "
                  "valid = valid[90%:], test = test)")
    splits = {"train": found["valid"][:cut], "valid": found["valid"][cut:], "test": found["test"]}
    return prepare_lm_corpus(root / "wikitext103_mini", "wikitext103_mini", splits,
                             {"source": str(source), "note": "train on valid[:90%], validate on valid[90%:]"})


def stream(corpus_dir: Path, split: str) -> np.ndarray:
    arr = TokenArray(Path(corpus_dir) / split)
    return np.asarray(arr.data, dtype=np.int64)


class LMBlocks:
    """The split's token stream cut into consecutive blocks of tokens_per_sample; the input is the stream shifted
    right by one (</s> first), the target the stream itself, so every token is a target once per epoch."""

    def __init__(self, corpus_dir: Path, split: str, tokens_per_sample: int):
        self.tokens = stream(corpus_dir, split)
        self.inputs = np.concatenate([[EOS], self.tokens[:-1]])
        self.block = tokens_per_sample
        n = len(self.tokens)
        self.starts = np.arange(0, n, tokens_per_sample)
        self.sizes = np.minimum(tokens_per_sample, n - self.starts)

    def __len__(self) -> int:
        return len(self.starts)

    def collate(self, indices) -> dict:
        from repro.data.batching import pad_right
        sl = [slice(self.starts[i], self.starts[i] + self.sizes[i]) for i in indices]
        target = pad_right([self.tokens[s] for s in sl])
        return {"tokens": pad_right([self.inputs[s] for s in sl], pad=PAD), "target": target,
                "ntokens": int(target.ne(PAD).sum())}
