"""The `tiny` scale's corpora, generated here in seconds: a smoke test of an install, and the tests' data.

tiny_parallel: a toy translation task (the target is the source reversed and upper-cased) for MT and
summarisation recipes; tiny_lm: random sentences over a small vocabulary; tiny_speech: the real LibriSpeech
utterances of a folder given as source (the repository's shared/data/librispeech sample).
"""

from __future__ import annotations

import random
from pathlib import Path

WORDS = "the a cat dog runs sees big small red blue house tree river walks under over green old".split()


def tiny_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        src = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
        pairs.append((src, " ".join(w.upper() for w in reversed(src.split()))))
    return pairs


def tiny_lm_lines(n: int, rng: random.Random) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 8))) for _ in range(n)]


def ensure_tiny_corpora(root: Path, speech_source: Path | None = None) -> list[str]:
    """Prepare tiny_parallel and tiny_lm under root (and tiny_speech from speech_source); returns those made."""
    from repro.data.parallel import prepare_parallel
    from repro.data.wikitext import prepare_lm_corpus
    made = []
    root = Path(root)
    if not (root / "tiny_parallel/meta.json").is_file():
        evals = {name: tuple(map(list, zip(*tiny_pairs(n, seed)))) for name, n, seed in (("valid", 12, 2),
                                                                                         ("test", 6, 3))}
        prepare_parallel(root / "tiny_parallel", "tiny_parallel", iter(tiny_pairs(300, 1)), evals, vocab_size=60,
                         langs=("src", "tgt"), provenance={"generated": "repro/data/tiny.py"})
        made.append("tiny_parallel")
    if not (root / "tiny_lm/meta.json").is_file():
        rng = random.Random(5)
        prepare_lm_corpus(root / "tiny_lm", "tiny_lm", {"train": tiny_lm_lines(200, rng), "valid": tiny_lm_lines(20, rng),
                                                        "test": tiny_lm_lines(20, rng)},
                          {"generated": "repro/data/tiny.py"})
        made.append("tiny_lm")
    if speech_source is not None and not (root / "tiny_speech/meta.json").is_file():
        from repro.data.librispeech import prepare_librispeech
        prepare_librispeech(root, speech_source, vocab_size=60, name="tiny_speech", workers=1)
        made.append("tiny_speech")
    return made
