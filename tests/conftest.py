"""Shared fixtures: tiny corpora generated here (seconds), and the real small corpora in ../shared/data."""

import os
import random
from pathlib import Path

import pytest

os.environ.setdefault("LNREPRO_QUIET", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
WORDS = "the a cat dog runs sees big small red blue house tree river walks under over green old".split()


def tiny_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """A toy translation task: the target is the source reversed and upper-cased."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        src = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
        pairs.append((src, " ".join(w.upper() for w in reversed(src.split()))))
    return pairs


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory) -> Path:
    """A data root holding the prepared `tiny_parallel` corpus."""
    from repro.data.parallel import prepare_parallel
    root = tmp_path_factory.mktemp("data")
    evals = {name: tuple(map(list, zip(*tiny_pairs(n, seed)))) for name, n, seed in (("valid", 12, 2), ("test", 6, 3))}
    prepare_parallel(root / "tiny_parallel", "tiny_parallel", iter(tiny_pairs(300, 1)), evals, vocab_size=60,
                     langs=("src", "tgt"), provenance={"generated": "tests/conftest.py"})
    return root


@pytest.fixture(scope="session")
def tiny_lm_root(tmp_path_factory) -> Path:
    """A data root holding the prepared word-level `tiny_lm` corpus."""
    from repro.data.wikitext import prepare_lm_corpus
    root = tmp_path_factory.mktemp("lmdata")
    rng = random.Random(5)
    lines = lambda n: [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 8))) for _ in range(n)]
    prepare_lm_corpus(root / "tiny_lm", "tiny_lm", {"train": lines(200), "valid": lines(20), "test": lines(20)},
                      {"generated": "tests/conftest.py"})
    return root
