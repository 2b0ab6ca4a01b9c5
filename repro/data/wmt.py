"""WMT16 English-German (paper 6.1): the 4.5M-pair training set of Vaswani et al. / Ott et al. 2018.

Training text: Europarl v7, CommonCrawl and News Commentary v11 from statmt.org's archives (downloaded, or found in
`--source`). Evaluation: newstest2010-2016 raw sources and references, through SacreBLEU's own test-set download,
or from `--source` files `newstest<year>.{en,de}` (the layout of shared/data/wmt_newstest_ende).

Differences from the paper's pipeline (said in the README too): the joint 32K vocabulary is a SentencePiece BPE
model trained on the raw text, not 32K subword-nmt merges on Moses-tokenised text; decoding the pieces is the
detokenisation. Cleaning applies Moses clean-corpus-n's 1-80 words and ratio 1.5 on whitespace words.
"""

from __future__ import annotations

import json
import tarfile
import urllib.request
from pathlib import Path
from typing import Iterator

from repro.checksum import sha256_file
from repro.data.parallel import prepare_parallel
from repro.data.text import PrepareError, paired, read_lines, split_lines
from repro.progress import console, progress_bar

ARCHIVES = {
    # archive name -> (URL, {member suffix: language})
    "training-parallel-europarl-v7.tgz": (
        "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        {"europarl-v7.de-en.en": "en", "europarl-v7.de-en.de": "de"}),
    "training-parallel-commoncrawl.tgz": (
        "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        {"commoncrawl.de-en.en": "en", "commoncrawl.de-en.de": "de"}),
    "training-parallel-nc-v11.tgz": (
        "http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz",
        {"news-commentary-v11.de-en.en": "en", "news-commentary-v11.de-en.de": "de"}),
}
NEWSTEST_YEARS = tuple(range(2010, 2017))
CHECKSUMS = "checksums.sha256.json"


def verify_or_record_checksum(path: Path) -> None:
    """The first time an archive is seen its SHA-256 is recorded beside it; every later use must match."""
    book = path.parent / CHECKSUMS
    sums = json.loads(book.read_text()) if book.is_file() else {}
    digest = sha256_file(path)
    if path.name in sums and sums[path.name] != digest:
        raise PrepareError(f"{path}: checksum mismatch (recorded {sums[path.name][:12]}…, now {digest[:12]}…); "
                           f"delete the file to download it again")
    if path.name not in sums:
        sums[path.name] = digest
        tmp = book.with_name(book.name + ".tmp")
        tmp.write_text(json.dumps(sums, indent=2, sort_keys=True))
        tmp.replace(book)


def network_reason(e: Exception) -> str:
    """Why a download failed, in words a user acts on: an unreachable network says so."""
    text = str(getattr(e, "reason", None) or e)
    unreachable = ("Name or service not known", "Temporary failure in name resolution", "Network is unreachable",
                   "No address associated", "timed out", "Connection refused", "nodename nor servname")
    if any(u in text for u in unreachable):
        return f"the network is unreachable: {text}"
    return text


def download(url: str, dest: Path) -> Path:
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            total = int(r.headers.get("Content-Length") or 0) or None
            with open(tmp, "wb") as f, progress_bar(f"download {dest.name}", total) as bar:
                while block := r.read(1 << 20):
                    f.write(block)
                    bar.advance(len(block))
    except OSError as e:
        tmp.unlink(missing_ok=True)
        err = PrepareError(f"cannot download {url} ({network_reason(e)}); put {dest.name} in a folder and pass "
                           f"--source")
        err.reason = network_reason(e)  # for callers that list several failed downloads in one line
        raise err from None
    tmp.replace(dest)
    return dest


def _member_text(tar_path: Path, suffix: str) -> list[str] | None:
    with tarfile.open(tar_path, "r:*") as tar:
        for m in tar:
            if m.isfile() and m.name.endswith(suffix):
                return split_lines(tar.extractfile(m).read().decode("utf-8", errors="replace"))
    return None


def _find_file(source: Path, name: str) -> Path | None:
    hits = sorted(source.rglob(name))
    return hits[0] if hits else None


def _member_names(members: dict[str, str]) -> tuple[str, str]:
    en = next(name for name, lang in members.items() if lang == "en")
    de = next(name for name, lang in members.items() if lang == "de")
    return en, de


def find_training_inputs(source: Path | None, cache: Path) -> tuple[dict, list[str]]:
    """For each training corpus: its extracted (en, de) files in `source`, or its archive (in `source`, else
    downloaded into `cache`). Returns (found, problems): every missing input is listed, not only the first."""
    found, problems = {}, []
    for archive, (url, members) in ARCHIVES.items():
        en_name, de_name = _member_names(members)
        if source is not None and (en := _find_file(source, en_name)) and (de := _find_file(source, de_name)):
            found[archive] = (en, de)
            continue
        path = _find_file(source, archive) if source is not None else None
        why = ""
        if path is None and source is None:
            try:
                path = download(url, cache / archive)
            except PrepareError as e:
                path, why = None, f" (download failed: {network_reason(e)})"
        if path is None:
            problems.append(f"{archive} (or its extracted {en_name}/{de_name}) from {url}{why}")
        else:
            found[archive] = path
    return found, problems


def training_pairs(found: dict) -> Iterator[tuple[str, str]]:
    """Yield (en, de) pairs of the three corpora, from extracted files or archives as found above."""
    for archive, (url, members) in ARCHIVES.items():
        en_name, de_name = _member_names(members)
        where = found[archive]
        if isinstance(where, tuple):
            with open(where[0], encoding="utf-8", errors="replace", newline="\n") as fe, \
                    open(where[1], encoding="utf-8", errors="replace", newline="\n") as fd:
                yield from paired(fe, fd, f"{where[0]} and {where[1]}")
            continue
        verify_or_record_checksum(where)
        console.print(f"reading {archive}")
        en_lines, de_lines = _member_text(where, en_name), _member_text(where, de_name)
        if en_lines is None or de_lines is None or len(en_lines) != len(de_lines):
            raise PrepareError(f"{where}: expected aligned members {en_name} and {de_name}")
        yield from zip(en_lines, de_lines)


def sacrebleu_test_set(year: int) -> str:
    """SacreBLEU's name for newstest<year> as the paper scores it."""
    return "wmt14/full" if year == 2014 else f"wmt{year % 100}"


def newstest(source: Path | None, year: int) -> tuple[list[str], list[str]]:
    """Raw English sources and German references of newstest<year>."""
    if source is not None:
        en, de = _find_file(source, f"newstest{year}.en"), _find_file(source, f"newstest{year}.de")
        if en and de:
            return read_lines(en), read_lines(de)
    try:
        from sacrebleu.utils import get_reference_files, get_source_file
        # newstest2014: SacreBLEU's 'wmt14' is the 2,737-line filtered set; the paper scores the full 3,003 lines
        # (takase/b2t_connection README.md: `sacrebleu -t wmt14/full`).
        test_set = sacrebleu_test_set(year)
        src = read_lines(Path(get_source_file(test_set, "en-de")))
        ref = read_lines(Path(get_reference_files(test_set, "en-de")[0]))
        return src, ref
    except Exception as e:  # sacrebleu raises several kinds on network failure
        where = f"in --source {source} or " if source is not None else ""
        raise PrepareError(f"newstest{year}: not found {where}through SacreBLEU's download ({e}); "
                           f"pass --source with newstest{year}.en/.de") from None


def prepare_wmt(root: Path, source: Path | None, vocab_size: int = 32000, name: str = "wmt16_ende") -> dict:
    """Every input is looked for first (newstest sets, then the three archives); if any is missing, one error lists
    them all and nothing is written."""
    out = root / name
    cache = root / "downloads"
    cache_existed = cache.exists()
    evals, problems = {}, []
    for y in NEWSTEST_YEARS:
        try:
            evals[f"newstest{y}"] = newstest(source, y)
        except PrepareError:
            problems.append(f"newstest{y}.en/.de (SacreBLEU test set {sacrebleu_test_set(y)}, en-de)")
    found, missing = find_training_inputs(source, cache)
    problems += missing
    if problems:
        if not cache_existed and cache.is_dir() and not any(cache.iterdir()):
            cache.rmdir()
        where = f"in --source {source}" if source is not None else "by download"
        if source is None and any("the network is unreachable" in p for p in problems):
            where += " (the network is unreachable)"
        raise PrepareError(f"wmt: {len(problems)} inputs not found {where}: " + "; ".join(problems)
                           + ". Put them in one folder and pass --source FOLDER")
    pairs = training_pairs(found)
    return prepare_parallel(out, name, pairs, evals, vocab_size, ("en", "de"),
                            provenance={"train": list(ARCHIVES), "test": "newstest2010-2016",
                                        "source": str(source) if source else "download"})


_ENTITIES = {"&apos;": "'", "&quot;": '"', "&amp;": "&", "&lt;": "<", "&gt;": ">", "&#91;": "[", "&#93;": "]",
             "&#124;": "|"}


def moses_detokenize(line: str) -> str:
    """Undo Moses escaping and the common tokenisation spaces (enough for the 10k-pair sample; not Moses itself)."""
    import re
    for k, v in _ENTITIES.items():
        line = line.replace(k, v)
    line = re.sub(r" ([,.;:!?%)\]}])", r"\1", line)
    line = re.sub(r"([(\[{$]) ", r"\1", line)
    line = re.sub(r" ' (s|re|ve|ll|d|m|t)\b", r"'\1", line)
    line = re.sub(r" (n't|'t|'s|'re|'ve|'ll|'d|'m)\b", r"\1", line)
    line = re.sub(r" @-@ ", "-", line)
    return " ".join(line.split())


def prepare_wmt_sample(root: Path, source: Path | None, vocab_size: int = 8000, name: str = "wmt_sample") -> dict:
    """The 10k real WMT En-De training pairs of shared/data (Moses-tokenised: detokenised here), evaluated on the
    real newstest2010-2016 (validation newstest2013). `--source` is the shared data folder holding
    wmt_ende_train_sample/ and wmt_newstest_ende/."""
    if source is None:
        raise PrepareError("wmt-sample: pass --source with wmt_ende_train_sample/ and wmt_newstest_ende/, "
                           "e.g. --source ../shared/data")
    en, de = _find_file(source, "train.en"), _find_file(source, "train.de")
    if en is None or de is None:
        raise PrepareError(f"--source {source}: wmt_ende_train_sample/train.en and train.de not found")
    pairs = paired((moses_detokenize(l) for l in read_lines(en)), (moses_detokenize(l) for l in read_lines(de)),
                   f"{en} and {de}")
    evals = {f"newstest{y}": newstest(source, y) for y in NEWSTEST_YEARS}
    return prepare_parallel(root / name, name, pairs, evals, vocab_size, ("en", "de"),
                            provenance={"source": str(source), "train": "wmt_ende_train_sample (detokenised)",
                                        "test": "newstest2010-2016"})
