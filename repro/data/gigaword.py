"""Gigaword headline generation (Rush et al. 2015; paper 6.2).

Paper scale: the harvardnlp release (`summary.tar.gz`: sumdata/train/{train,valid}.{article,title}.txt and the
1,951-pair test set Giga/{input.txt,task1_ref0.txt}), from `--source`. The paper's 13M extra pairs (REALNEWS,
NewsCrawl) are not public: the deep recipes run without them.

`UNK` in the test set: train and valid write rare words as `<unk>`, the test set as `UNK`. We follow the common
fairseq/Takase practice of mapping the test *source* `UNK` to `<unk>` (so the model sees its own unknown token)
and leaving the references untouched; generated `<unk>` tokens are scored as they are.

Mini scale (shared/data/gigaword: 10k train, 1k valid pairs): the first 500 valid pairs are validation, the
other 500 the held-out test set.
"""

from __future__ import annotations

from pathlib import Path

from repro.data.parallel import prepare_parallel
from repro.data.text import PrepareError, paired, read_lines


def _lines(path: Path) -> list[str]:
    return read_lines(path)


def _find(source: Path, *names: str) -> Path | None:
    for name in names:
        hits = sorted(source.rglob(name))
        if hits:
            return hits[0]
    return None


def prepare_gigaword(root: Path, source: Path | None, vocab_size: int | None = None, name: str | None = None) -> dict:
    if source is None:
        raise PrepareError("gigaword: pass --source with the Rush et al. files (train.article.txt, "
                           "train.title.txt, valid.*.filter.txt[, Giga/input.txt, Giga/task1_ref0.txt])")
    need = {k: _find(source, *v) for k, v in {
        "train_src": ("train.article.txt",), "train_tgt": ("train.title.txt",),
        "valid_src": ("valid.article.filter.txt", "valid.article.txt"),
        "valid_tgt": ("valid.title.filter.txt", "valid.title.txt")}.items()}
    missing = [k for k, v in need.items() if v is None]
    if missing:
        raise PrepareError(f"--source {source}: missing {', '.join(missing)} (expected Rush et al. file names)")
    valid_src, valid_tgt = _lines(need["valid_src"]), _lines(need["valid_tgt"])
    test_src_path, test_ref_path = _find(source, "input.txt"), _find(source, "task1_ref0.txt")
    if test_src_path and test_ref_path:
        test = ([s.replace("UNK", "<unk>") for s in _lines(test_src_path)], _lines(test_ref_path))
        evals = {"valid": (valid_src, valid_tgt), "test": test}
        note = "test = Giga/input.txt + task1_ref0.txt (1,951 pairs), source UNK -> <unk>"
    else:  # the shared sample: hold out half of valid as the test set
        half = len(valid_src) // 2
        evals = {"valid": (valid_src[:half], valid_tgt[:half]), "test": (valid_src[half:], valid_tgt[half:])}
        note = f"no Giga test set in --source: valid[:{half}] is validation, valid[{half}:] the test set"
    # The shared sample (no official test set) is a different corpus from the full release: its own name.
    full = bool(test_src_path and test_ref_path)
    name = name or ("gigaword" if full else "gigaword_sample")
    vocab_size = vocab_size or (32000 if full else 8000)  # 32K BPE as the paper; 8K for the 10k-pair sample
    train = paired(_lines(need["train_src"]), _lines(need["train_tgt"]), f"{need['train_src']} and {need['train_tgt']}")
    return prepare_parallel(root / name, name, train, evals, vocab_size, ("article", "title"),
                            provenance={"source": str(source), "test": note}, clean=False)
