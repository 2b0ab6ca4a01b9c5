"""prepare: WMT from archives in the real layout, Multi30k and Gigaword from the shared corpora, SacreBLEU."""

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import SHARED_DATA, tiny_pairs
from repro.cli import app
from repro.data.binarized import TokenArray
from repro.data.parallel import clean_pairs
from repro.data.wmt import ARCHIVES, moses_detokenize
from repro.eval.metrics import bleu, rouge
from repro.data.text import corpus_fingerprint

runner = CliRunner()
NEWSTEST = SHARED_DATA / "wmt_newstest_ende"


def make_archives(folder: Path, n: int = 150) -> None:
    """Small archives with the member names and folder layout of the statmt.org originals."""
    pairs = tiny_pairs(n, 7)
    for archive, (_, members) in ARCHIVES.items():
        with tarfile.open(folder / archive, "w:gz") as tar:
            for member, lang in members.items():
                text = "\n".join(s if lang == "en" else t for s, t in pairs).encode() + b"\n"
                info = tarfile.TarInfo(f"training/{member}")
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text))


@pytest.mark.shared_data
def test_prepare_wmt_from_archives(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    make_archives(src)
    for f in NEWSTEST.iterdir():  # the newstest layout of shared/data
        (src / f.name).write_bytes(f.read_bytes())
    r = runner.invoke(app, ["prepare", "wmt", "--source", str(src), "--root", str(tmp_path / "data"),
                            "--vocab-size", "200"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "data/wmt16_ende"
    meta = json.loads((out / "meta.json").read_text())
    assert meta["splits"] == sorted(["train"] + [f"newstest{y}" for y in range(2010, 2017)])
    assert len(TokenArray(out / "train.src")) == 3 * 150
    assert len(TokenArray(out / "newstest2014.tgt")) == 3003
    assert (out / "newstest2014.tgt.txt").read_text() == (NEWSTEST / "newstest2014.de").read_text()
    assert json.loads((src / "checksums.sha256.json").read_text()).keys() == set(ARCHIVES)
    assert not list(out.glob("*.tmp"))
    # A second prepare resumes (nothing to redo) and a changed archive is caught by its checksum
    r = runner.invoke(app, ["prepare", "wmt", "--source", str(src), "--root", str(tmp_path / "data2"),
                            "--vocab-size", "200"])
    assert r.exit_code == 0
    with open(src / "training-parallel-nc-v11.tgz", "ab") as f:
        f.write(b"x")
    r = runner.invoke(app, ["prepare", "wmt", "--source", str(src), "--root", str(tmp_path / "data3")])
    assert r.exit_code == 2 and "checksum mismatch" in r.output


def test_prepare_wmt_lists_every_missing_input_and_leaves_nothing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = runner.invoke(app, ["prepare", "wmt", "--source", str(empty), "--root", str(tmp_path / "d")])
    text = r.output.replace("\n", "")
    assert r.exit_code == 2 and "10 inputs not found" in text, r.output
    for name in ["newstest2010", "newstest2016", "wmt14/full", *ARCHIVES]:
        assert name in text, name
    assert "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz" in text
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").rglob("*"))
    assert not list(empty.iterdir())


@pytest.mark.shared_data
def test_sacrebleu_reference_against_itself_is_100():
    refs = (NEWSTEST / "newstest2014.de").read_text(encoding="utf-8").splitlines()
    score, sig = bleu(refs, refs)
    assert score == pytest.approx(100.0)
    assert sig.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


def test_rouge_against_rouge_score_directly():
    from rouge_score import rouge_scorer
    hyps = ["police arrest man in attack", "china wins gold", "stocks fall sharply on wall street"]
    refs = ["man arrested after attack", "china takes gold medal", "wall street stocks fall"]
    ours = rouge(hyps, refs)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    direct = [scorer.score(r, h) for h, r in zip(hyps, refs)]
    for k in ("rouge1", "rouge2", "rougeL"):
        assert ours[k] == pytest.approx(100 * np.mean([d[k].fmeasure for d in direct]))
    assert rouge(refs, refs) == {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0}


def test_bleu_needs_no_rouge_package(monkeypatch):
    """A machine with torch and sacrebleu but no rouge-score (a GPU image, say) still scores MT runs."""
    import importlib
    import sys

    import repro.eval.metrics  # loaded, so that monkeypatch puts it back afterwards
    monkeypatch.setattr(repro.eval, "metrics", repro.eval.metrics)
    monkeypatch.setitem(sys.modules, "rouge_score", None)  # `import rouge_score` now raises ImportError
    monkeypatch.delitem(sys.modules, "repro.eval.metrics")
    fresh = importlib.import_module("repro.eval.metrics")
    line = "Ein Mann in einem blauen Hemd spielt Gitarre ."
    assert fresh.bleu([line], [line])[0] == pytest.approx(100.0)
    with pytest.raises(ImportError):
        fresh.rouge(["a"], ["a"])


def test_cleaning_rule():
    kept = list(clean_pairs([("a b", "c d"), ("a", "b c d e"), ("x " * 81, "y " * 81), ("", "z")]))
    assert kept == [("a b", "c d")]


def test_moses_detokenize():
    assert moses_detokenize("Parliament &apos;s role , ( he said ) isn &apos;t it ?") == "Parliament's role, (he said) isn't it?"


@pytest.mark.shared_data
def test_prepare_multi30k_and_gigaword_sample(tmp_path):
    r = runner.invoke(app, ["prepare", "multi30k", "--source", str(SHARED_DATA / "multi30k"), "--root", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert len(TokenArray(tmp_path / "multi30k/train.src")) == 28112  # of 29,000: the WMT cleaning rule
    assert len(TokenArray(tmp_path / "multi30k/test_2016_flickr.tgt")) == 1000
    r = runner.invoke(app, ["prepare", "gigaword", "--source", str(SHARED_DATA / "gigaword"), "--root", str(tmp_path)])
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "gigaword_sample/meta.json").read_text())
    assert meta["vocab_size"] == 8000 and "valid[500:] the test set" in meta["provenance"]["test"]
    assert len(TokenArray(tmp_path / "gigaword_sample/test.src")) == 500
    # The same corpus prepared from another path on another root: meta.json differs (it names the source), the
    # fingerprint a run record keeps does not; a changed file changes it.
    source = tmp_path / "elsewhere"
    shutil.copytree(SHARED_DATA / "gigaword", source)
    r = runner.invoke(app, ["prepare", "gigaword", "--source", str(source), "--root", str(tmp_path / "other")])
    assert r.exit_code == 0, r.output
    other = json.loads((tmp_path / "other/gigaword_sample/meta.json").read_text())
    assert other != meta and corpus_fingerprint("g", other) == corpus_fingerprint("g", meta)
    other["files"]["test.tgt.bin"]["sha256"] = "0" * 64
    assert corpus_fingerprint("g", other) != corpus_fingerprint("g", meta)


def test_tiny_summarization_end_to_end(tiny_root, tmp_path):
    results, run = tmp_path / "results", tmp_path / "run"
    common = ["--root", str(tiny_root), "--results", str(results)]
    REPO = Path(__file__).resolve().parents[1]
    r = runner.invoke(app, ["train", str(REPO / "recipes/gigaword/6L-6L-b2t.yaml"), "--scale", "tiny",
                            "--run-dir", str(run), *common])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["evaluate", str(run), *common])
    assert r.exit_code == 0, r.output
    m = json.loads((run / "metrics.json").read_text())
    assert set(m["splits"]["test"]) == {"rouge1", "rouge2", "rougeL"}
    csv = runner.invoke(app, ["table", "2", "--scale", "tiny", "--format", "csv", "--results", str(results)]).output
    assert any(l.startswith("2,6L-6L,b2t,R-1,38.43,") and l.endswith(",tiny,ok,1,0") for l in csv.splitlines())


def test_prepare_wmt_without_a_network_says_so(tmp_path, monkeypatch):
    import urllib.error
    import urllib.request
    import sacrebleu.utils
    from repro.data.text import PrepareError
    from repro.data.wmt import prepare_wmt

    def offline(*a, **k):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setattr(sacrebleu.utils, "get_source_file", offline)
    with pytest.raises(PrepareError) as e:
        prepare_wmt(tmp_path, None)
    text = str(e.value)
    assert "10 inputs not found by download (the network is unreachable)" in text
    assert "download failed: the network is unreachable" in text and "pass --source FOLDER" in text


def test_prepare_librispeech_without_a_network_names_every_archive(tmp_path, monkeypatch):
    import urllib.error
    import urllib.request
    from repro.data.librispeech import PAPER_SPLITS, extract_archives
    from repro.data.text import PrepareError

    def offline(*a, **k):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(PrepareError) as e:
        extract_archives(None, tmp_path)
    text = str(e.value)
    assert f"{len(PAPER_SPLITS)} archives could not be downloaded (the network is unreachable" in text
    assert all(f"{name}.tar.gz" in text for name in PAPER_SPLITS)


def test_corpora_split_at_newlines_alone_and_pair_sides_of_equal_length(tmp_path):
    """A form feed, a lone carriage return or U+2028 inside a sentence keeps it one line (str.splitlines and
    universal newlines split there, misaligning a parallel corpus); sides of different lengths are refused."""
    from typer.testing import CliRunner

    from repro.cli import app
    from repro.data.text import PrepareError, paired, read_lines, split_lines
    assert split_lines("a\x0cb\nc\r\nd\u2028e\rf\n") == ["a\x0cb", "c", "d\u2028e\rf"]
    (tmp_path / "x.txt").write_bytes("one\x0cstill one\ntwo\r\n".encode())
    assert read_lines(tmp_path / "x.txt") == ["one\x0cstill one", "two"]
    with pytest.raises(PrepareError, match="src and tgt: the two sides have different numbers of lines"):
        list(paired(["a", "b"], ["a"], "src and tgt"))
    source = tmp_path / "giga"
    source.mkdir()
    (source / "train.article.txt").write_text("".join(f"article {i} words\n" for i in range(40)) + "x\x0cy\n")
    (source / "train.title.txt").write_text("".join(f"title {i}\n" for i in range(40)))
    (source / "valid.article.filter.txt").write_text("".join(f"v article {i}\n" for i in range(6)))
    (source / "valid.title.filter.txt").write_text("".join(f"v title {i}\n" for i in range(6)))
    r = CliRunner().invoke(app, ["prepare", "gigaword", "--source", str(source), "--root", str(tmp_path / "data"),
                                 "--vocab-size", "100"])
    assert r.exit_code == 2 and "different numbers of lines" in r.output, r.output
    assert not (tmp_path / "data" / "gigaword_sample").exists()
