"""Multi30k task 1 En-De (Elliott et al. 2016): the `mini` scale's real MT corpus (29k training pairs).

Raw, true-cased captions from the gzipped files of shared/data/multi30k (or `--source`): train for training
(cleaned with the WMT rule, 1-80 words and ratio 1.5: 28,112 of 29,000 pairs kept),
val for validation, and the four test sets (2016/2017/2018 Flickr, 2017 MSCOCO) for BLEU.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from repro.data.parallel import prepare_parallel
from repro.data.text import PrepareError, paired

TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")


def _read(source: Path, name: str, lang: str) -> list[str]:
    for path in (source / f"{name}.{lang}.gz", source / f"{name}.{lang}"):
        if path.is_file():
            opener = gzip.open if path.suffix == ".gz" else open
            try:
                with opener(path, "rt", encoding="utf-8", newline="\n") as f:  # lines end at "\n" alone
                    return [line.rstrip("\n").removesuffix("\r") for line in f]
            except (OSError, EOFError, UnicodeDecodeError) as e:  # truncated or non-gzip archive, non-UTF-8 text
                raise PrepareError(f"{path}: cannot be read ({type(e).__name__}); replace it with a good copy") from None
    raise PrepareError(f"--source {source}: {name}.{lang}.gz not found (expected Multi30k's data/task1/raw files)")


def prepare_multi30k(root: Path, source: Path | None, vocab_size: int = 8000, name: str = "multi30k") -> dict:
    if source is None:
        raise PrepareError("multi30k: pass --source with the raw gzipped files, e.g. --source ../shared/data/multi30k")
    train = list(paired(_read(source, "train", "en"), _read(source, "train", "de"), f"{source}: train.en and train.de"))
    evals = {"valid": (_read(source, "val", "en"), _read(source, "val", "de"))}
    for t in TEST_SETS:
        evals[t] = (_read(source, t, "en"), _read(source, t, "de"))
    return prepare_parallel(root / name, name, iter(train), evals, vocab_size, ("en", "de"),
                            provenance={"source": str(source), "train": "train", "valid": "val",
                                        "test": list(TEST_SETS)})
