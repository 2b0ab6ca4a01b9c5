"""A small real-speech corpus made here: English sentences spoken by espeak-ng, for the `mini` Table 4.

Sentences are Multi30k's short English captions (real text, at most 9 words). Each "speaker" is an espeak-ng
voice with its own pitch and rate; train, dev and test use disjoint speakers, so dev/test WER measures held-out
voices. Light white noise (about 30 dB SNR) is added, audio is resampled to 16 kHz and written as FLAC in the
LibriSpeech layout with upper-case, punctuation-free transcripts; then the very same `prepare librispeech
--source` path takes over.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import multiprocessing
from pathlib import Path

import numpy as np

from repro.data.librispeech import prepare_librispeech
from repro.data.text import PrepareError, write_json_atomic
from repro.progress import progress_bar

# (voice, pitch 0-99, words per minute): one speaker each
TRAIN_SPEAKERS = [("en-us", 50, 160), ("en-gb", 40, 150), ("en-gb-scotland", 55, 170), ("en-029", 45, 155),
                  ("en-gb-x-rp", 60, 165), ("en-us", 30, 145), ("en-gb-x-gbclan", 50, 175), ("en", 70, 160),
                  ("en-us+f3", 60, 150), ("en-gb+f2", 55, 165)]
DEV_SPEAKERS = [("en-gb-x-gbcwmd", 45, 160), ("en-us+m3", 40, 155)]
TEST_SPEAKERS = [("en-us+f4", 65, 160), ("en-gb-scotland+m2", 35, 150)]


def normalise(text: str) -> str:
    """LibriSpeech-style transcript: upper case, letters, digits and apostrophes, single spaces."""
    return " ".join(re.sub(r"[^A-Z0-9' ]+", " ", text.upper()).split())


def _synthesise(job: tuple) -> None:
    import soundfile as sf
    import torch
    import torchaudio
    text, voice, pitch, rate, out_path, seed = job
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "u.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", str(rate), "-w", str(wav), text],
                       check=True, capture_output=True)
        audio, sr = sf.read(wav, dtype="float32")
    audio = torchaudio.functional.resample(torch.as_tensor(audio), sr, 16000).numpy()
    rng = np.random.default_rng(seed)
    power = float(np.mean(audio ** 2)) or 1e-8
    audio = audio + rng.normal(0.0, np.sqrt(power / 10 ** (30 / 10)), size=audio.shape).astype(np.float32)
    sf.write(out_path, np.clip(audio, -1, 1), 16000, format="FLAC", subtype="PCM_16")


def synthesise_corpus(sentences_source: Path, out: Path, train: int, dev: int, test: int, max_words: int = 9,
                      seed: int = 1, workers: int | None = None) -> Path:
    if shutil.which("espeak-ng") is None:
        raise PrepareError("speech-mini needs espeak-ng (apt-get install espeak-ng)")
    path = sentences_source / "train.en.gz"
    if not path.is_file():
        raise PrepareError(f"--source {sentences_source}: train.en.gz (Multi30k English captions) not found")
    # Audio already on disk is reused, so it must have been made with the same settings.
    settings = {"train": train, "dev": dev, "test": test, "max_words": max_words, "seed": seed}
    settings_path = out / "settings.json"
    if settings_path.is_file() and json.loads(settings_path.read_text()) != settings:
        raise PrepareError(f"{out}: made with other settings ({settings_path}); remove it to make them again")
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(settings_path, settings)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        # Short captions only (about 2.7 s of speech each): more distinct sentences for the same hours of audio,
        # and shorter alignments for an attention-only model trained from scratch to find.
        sentences = [s.strip() for s in f if 0 < len(normalise(s).split()) <= max_words]
    if len(sentences) < train + dev + test:
        raise PrepareError(f"--source {sentences_source}: only {len(sentences)} captions of at most {max_words} "
                           f"words, {train + dev + test} needed")
    rng = random.Random(seed)
    rng.shuffle(sentences)
    jobs, transcripts = [], {}
    offset = 0
    for split, speakers, n in (("train", TRAIN_SPEAKERS, train), ("dev", DEV_SPEAKERS, dev), ("test", TEST_SPEAKERS, test)):
        for k in range(n):
            spk_index = k % len(speakers)
            voice, pitch, rate = speakers[spk_index]
            spk = {"train": 100, "dev": 200, "test": 300}[split] + spk_index
            chapter = 1
            utt = f"{spk}-{chapter}-{k // len(speakers):04d}"
            folder = out / "LibriSpeech" / split / str(spk) / str(chapter)
            folder.mkdir(parents=True, exist_ok=True)
            text = sentences[offset + k]
            transcripts.setdefault(folder / f"{spk}-{chapter}.trans.txt", []).append(f"{utt} {normalise(text)}")
            flac = folder / f"{utt}.flac"
            if not flac.is_file():
                jobs.append((text, voice, pitch, rate, str(flac), seed * 100003 + offset + k))
        offset += n
    workers = workers or min(8, os.cpu_count() or 1)
    with progress_bar("espeak-ng", len(jobs)) as bar, multiprocessing.get_context("spawn").Pool(workers) as pool:  # fork after torch threads can hang
        for _ in pool.imap_unordered(_synthesise, jobs, chunksize=8):
            bar.advance()
    for trans, lines in transcripts.items():  # written last: an utterance is listed only once its audio exists
        tmp = trans.with_name(trans.name + ".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(trans)
    return out


def prepare_speech_mini(root: Path, source: Path | None, vocab_size: int = 1000, train: int = 6000,
                        dev: int = 200, test: int = 200) -> dict:
    if source is None:
        raise PrepareError("speech-mini: pass --source with Multi30k's raw files, e.g. --source ../shared/data/multi30k")
    audio_dir = synthesise_corpus(source, root / "downloads" / "speech_mini", train, dev, test)
    return prepare_librispeech(root, audio_dir, vocab_size=vocab_size, name="speech_mini")
