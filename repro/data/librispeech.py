"""LibriSpeech ASR (Panayotov et al. 2015; paper 6.4), prepared the fairseq S2T way (Wang et al. 2020).

- Audio: the OpenSLR archives (train-clean-100, train-clean-360, train-other-500, dev/test clean/other),
  downloaded or found in `--source` (archives, or extracted `LibriSpeech/<split>/<spk>/<chapter>/` folders).
  FLAC is read with soundfile (its wheels carry libsndfile, so it works on a fresh CPU machine).
- Features: 80-dim log-mel filterbanks from torchaudio.compliance.kaldi.fbank on the waveform scaled to the
  16-bit range, then utterance-level mean/variance normalisation; computed once, in parallel, streamed to disk.
- Text: transcripts lower-cased; SentencePiece unigram (10K at paper scale) on the training transcripts.

Output per split: <split>.feats.bin (float32 frames x 80) + <split>.feats.idx (frame offsets), <split>.tgt.bin/.idx
(piece ids), <split>.tgt.txt (lower-cased transcripts), <split>.tsv (manifest: id, audio path from LibriSpeech/ on,
transcript); spm.model; meta.json last.
All train-* folders are merged into one split `train`; other split names are kept.
"""

from __future__ import annotations

import math
import os
import tarfile
import multiprocessing
from pathlib import Path

import numpy as np
import torch

from repro.data.batching import pad_right
from repro.data.binarized import TokenArray, TokenArrayWriter
from repro.data.text import (EOS, PrepareError, encode_file, file_facts, train_sentencepiece, write_json_atomic,
                             write_lines_atomic)
from repro.data.wmt import download
from repro.progress import console, progress_bar

OPENSLR = "https://www.openslr.org/resources/12/{}.tar.gz"
PAPER_SPLITS = ("train-clean-100", "train-clean-360", "train-other-500", "dev-clean", "dev-other",
                "test-clean", "test-other")
N_MELS = 80


def fbank_features(waveform: np.ndarray, sample_rate: int) -> np.ndarray:
    """(frames, 80) float32: Kaldi-compatible log-mel filterbanks, then per-utterance mean/variance normalisation."""
    import torchaudio
    wav = torch.as_tensor(waveform, dtype=torch.float32).unsqueeze(0) * 32768.0
    feats = torchaudio.compliance.kaldi.fbank(wav, num_mel_bins=N_MELS, sample_frequency=sample_rate)
    feats = (feats - feats.mean(0)) / feats.std(0).clamp_min(1e-5)
    return feats.numpy().astype(np.float32)


def _features_of(path: str) -> np.ndarray:
    import soundfile as sf
    audio, sr = sf.read(path, dtype="float32")
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    return fbank_features(audio, sr)


def scan(split_dir: Path) -> list[tuple[str, Path, str]]:
    """(utterance id, flac path, transcript) for every utterance listed in the split's *.trans.txt files."""
    out = []
    for trans in sorted(split_dir.rglob("*.trans.txt")):
        for line in trans.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            utt, text = line.split(" ", 1) if " " in line else (line, "")
            flac = trans.parent / f"{utt}.flac"
            if not flac.is_file():
                raise PrepareError(f"{trans}: lists {utt} but {flac.name} is missing")
            out.append((utt, flac, text.strip()))
    return out


def layout_path(flac: Path) -> str:
    """LibriSpeech/<split>/<speaker>/<chapter>/<utt>.flac: a flac's path below the folder that holds the layout."""
    return flac.relative_to(flac.parents[4]).as_posix()


def find_split_dirs(source: Path) -> dict[str, list[Path]]:
    """Split name -> folders, from extracted LibriSpeech/<split>/ folders under `source`."""
    found: dict[str, list[Path]] = {}
    for base in sorted({p.parent.parent.parent.parent for p in source.rglob("*.trans.txt")}):
        if base.name != "LibriSpeech":
            continue
        for d in sorted(p for p in base.iterdir() if p.is_dir()):
            found.setdefault("train" if d.name.startswith("train") else d.name, []).append(d)
    return found


def extract_archives(source: Path | None, root: Path) -> Path:
    """Archives in `source` (or downloaded) are extracted once under root/downloads; returns the folder to scan.
    Every archive is fetched before any is extracted, and one error names every one that could not be."""
    target = root / "downloads" / "librispeech"
    archives, failed = {}, []
    for name in PAPER_SPLITS:
        if (target / f".{name}.extracted").is_file():
            continue
        archive = next(iter(sorted(source.rglob(f"{name}.tar.gz"))), None) if source else None
        if archive is None and source is None:
            try:
                archive = download(OPENSLR.format(name), root / "downloads" / f"{name}.tar.gz")
            except PrepareError as e:
                failed.append((OPENSLR.format(name), getattr(e, "reason", str(e))))
                continue
        if archive is not None:  # with --source, only what it holds
            archives[name] = archive
    if failed:
        raise PrepareError(f"librispeech: {len(failed)} archives could not be downloaded ({failed[0][1]}): "
                           + ", ".join(url for url, _ in failed) + "; put them in a folder and pass --source")
    for name, archive in archives.items():
        done = target / f".{name}.extracted"
        console.print(f"extracting {archive.name}")
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        done.touch()
    return target


def feature_writer(prefix: Path) -> TokenArrayWriter:
    return TokenArrayWriter(prefix, dtype=np.float32)


def feature_array(prefix: Path) -> TokenArray:
    """Frames (rows of 80 float32) of every utterance of a split."""
    return TokenArray(prefix, dtype=np.float32, width=N_MELS, out_dtype=np.float32)


def _same_utterances(manifest: Path, utterances: list[tuple[str, Path, str]]) -> bool:
    """Whether a stored manifest lists the same utterance ids and transcripts (the audio folder may have moved)."""
    if not manifest.is_file():
        return False
    stored = [line.split("\t") for line in manifest.read_text(encoding="utf-8").splitlines()]
    return [(row[0], row[-1]) for row in stored] == [(u, t) for u, _, t in utterances]


def prepare_split(out: Path, split: str, utterances: list[tuple[str, Path, str]], workers: int) -> bool:
    """Features, manifest and transcripts of one split. False when an earlier prepare already made them from the same
    utterances; a split whose source changed (e.g. speech-mini made again) is prepared again, not reused."""
    if (out / f"{split}.feats.idx").is_file() and _same_utterances(out / f"{split}.tsv", utterances):
        return False
    for stale in (f"{split}.feats.idx", f"{split}.tgt.idx"):  # the completion markers go first
        (out / stale).unlink(missing_ok=True)
    # The manifest names audio by its place in the LibriSpeech layout, not by where this machine keeps it: a corpus
    # prepared from two folders then has the same files, and so the same fingerprint in its run records.
    write_lines_atomic(out / f"{split}.tsv", [f"{u}\t{layout_path(p)}\t{t}" for u, p, t in utterances])
    write_lines_atomic(out / f"{split}.tgt.txt", [t.lower() for _, _, t in utterances])
    writer = feature_writer(out / f"{split}.feats")
    paths = [str(p) for _, p, _ in utterances]
    with progress_bar(f"fbank {split}", len(paths)) as bar:
        if workers > 1 and len(paths) > 8:
            # spawn, not fork: forking a process whose torch already started threads can deadlock
            with multiprocessing.get_context("spawn").Pool(workers) as pool:
                for feats in pool.imap(_features_of, paths, chunksize=4):
                    writer.add(feats)
                    bar.advance()
        else:
            for p in paths:
                writer.add(_features_of(p))
                bar.advance()
    writer.close()
    return True


def prepare_librispeech(root: Path, source: Path | None, vocab_size: int = 10000, name: str | None = None,
                        workers: int | None = None) -> dict:
    scan_root = source if source is not None and find_split_dirs(source) else extract_archives(source, root)
    splits = find_split_dirs(scan_root)
    if not splits:
        raise PrepareError(f"--source {source}: no LibriSpeech/<split>/<speaker>/<chapter>/*.trans.txt found")
    name = name or ("librispeech" if "train" in splits else "librispeech_sample")
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    workers = workers or min(8, os.cpu_count() or 1)
    utts = {s: [u for d in dirs for u in scan(d)] for s, dirs in splits.items()}
    text_split = "train" if "train" in utts else sorted(utts)[0]
    remade = [split for split, items in utts.items() if prepare_split(out, split, items, workers)]
    model = out / "spm.model"
    if text_split in remade:  # new training transcripts: a new SentencePiece model, every split encoded again
        model.unlink(missing_ok=True)
        for split in utts:
            (out / f"{split}.tgt.idx").unlink(missing_ok=True)
    if not model.is_file():
        train_sentencepiece([out / f"{text_split}.tgt.txt"], out / "spm", vocab_size, "unigram")
    for split in utts:
        if not (out / f"{split}.tgt.idx").is_file():
            encode_file(model, out / f"{split}.tgt.txt", out / f"{split}.tgt", description=f"{name} {split}")
    import sentencepiece as spm
    meta = {"corpus": name, "kind": "speech", "spm_model": "spm.model", "n_mels": N_MELS,
            "vocab_size": spm.SentencePieceProcessor(model_file=str(model)).get_piece_size(),
            "splits": sorted(utts), "utterances": {s: len(u) for s, u in utts.items()},
            "provenance": {"source": str(source) if source else "OpenSLR 12"},
            # every file's size (and small files' checksums): read_meta verifies them on every load
            "files": {p.name: file_facts(p) for p in sorted(out.iterdir())
                      if p.is_file() and p.name != "meta.json" and not p.name.endswith(".tmp")}}
    write_json_atomic(out / "meta.json", meta)
    return meta


def spec_augment(feats: torch.Tensor, freq_masks: int = 2, freq_width: int = 27, time_masks: int = 2,
                 time_width: int = 100, time_p: float = 1.0) -> torch.Tensor:
    """fairseq's LibriSpeech SpecAugment policy ("ld", LibriSpeech double): 2 frequency masks of width in [0, F=27),
    2 time masks of width in [0, min(T=100, time_p x frames)), no time warp (fairseq
    data/audio/feature_transforms/specaugment.py, with its policy's time_mask_p 1.0 unless `time_p` says less).
    Masks are filled with the mean (zero after utterance normalisation). Uses torch's RNG (saved for resume)."""
    x = feats.clone()
    t, c = x.shape
    for _ in range(freq_masks):
        w = int(torch.randint(0, freq_width, ()))
        f0 = int(torch.randint(0, max(1, c - w), ()))
        x[:, f0:f0 + w] = 0.0
    widest = min(time_width, math.floor(t * time_p))
    if widest < 1:  # too short an utterance for any time mask
        return x
    for _ in range(time_masks):
        w = int(torch.randint(0, widest, ()))
        t0 = int(torch.randint(0, max(1, t - w), ()))
        x[t0:t0 + w, :] = 0.0
    return x


class SpeechData:
    """Features and transcript pieces of one split; batches are sized by frames (data.max_tokens)."""

    def __init__(self, corpus_dir: Path, split: str, specaugment: bool = False, max_frames: int = 6000,
                 time_p: float = 1.0):
        corpus_dir = Path(corpus_dir)
        self.feats = feature_array(corpus_dir / f"{split}.feats")
        self.tgt = TokenArray(corpus_dir / f"{split}.tgt")
        self.specaugment, self.time_p = specaugment, time_p
        self.sizes = self.feats.sizes.copy()
        self.sizes[self.sizes > max_frames] = np.iinfo(np.int32).max  # never batched
        self.src = self  # decoding orders utterances by self.src.sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def collate(self, indices) -> dict:
        feats = [torch.as_tensor(self.feats[i]) for i in indices]
        if self.specaugment:
            feats = [spec_augment(f, time_p=self.time_p) for f in feats]
        lengths = torch.tensor([len(f) for f in feats])
        src = torch.zeros(len(feats), int(lengths.max()), N_MELS)
        for i, f in enumerate(feats):
            src[i, : len(f)] = f
        tgt = [self.tgt[i] for i in indices]
        return {"ids": torch.as_tensor(np.asarray(indices)), "src": src, "src_lengths": lengths,
                "prev": pad_right([np.concatenate([[EOS], t]) for t in tgt]),
                "target": pad_right([np.append(t, EOS) for t in tgt]), "ntokens": sum(len(t) + 1 for t in tgt)}
