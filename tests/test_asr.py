"""LibriSpeech: features equal torchaudio's fbank; WER; SpecAugment; tiny train -> decode -> WER; speech-mini."""

import json
import shutil
from pathlib import Path

import pytest
import soundfile as sf
import torch
import torchaudio
from typer.testing import CliRunner

from conftest import SHARED_DATA
from repro.cli import app
from repro.data.librispeech import feature_array, prepare_librispeech, spec_augment
from repro.data.text import PrepareError
from repro.eval.metrics import edit_distance, wer
from repro.data.text import corpus_fingerprint

REPO = Path(__file__).resolve().parents[1]
LIBRI = SHARED_DATA / "librispeech"
runner = CliRunner()


@pytest.fixture(scope="module")
def speech_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech")
    prepare_librispeech(root, LIBRI, vocab_size=60, name="tiny_speech", workers=1)
    return root


@pytest.mark.shared_data
def test_prepare_shared_utterances_and_features_equal_fbank(speech_root):
    out = speech_root / "tiny_speech"
    meta = json.loads((out / "meta.json").read_text())
    assert meta["utterances"] == {"dev-clean": 2, "test-clean": 4}
    manifest = (out / "test-clean.tsv").read_text().splitlines()
    utt, path, text = manifest[0].split("\t")
    assert utt == "1089-134686-0000" and text.startswith("HE HOPED THERE WOULD BE STEW")
    assert path == "LibriSpeech/test-clean/1089/134686/1089-134686-0000.flac"  # below the source, wherever it is
    audio, sr = sf.read(LIBRI / path, dtype="float32")
    ref = torchaudio.compliance.kaldi.fbank(torch.tensor(audio).unsqueeze(0) * 32768, num_mel_bins=80,
                                            sample_frequency=sr)
    ref = (ref - ref.mean(0)) / ref.std(0)
    ours = torch.as_tensor(feature_array(out / "test-clean.feats")[0])
    assert ours.shape == ref.shape == (1042, 80)
    assert (ours - ref).abs().max() < 1e-4
    assert (out / "test-clean.tgt.txt").read_text().splitlines()[0] == text.lower()


@pytest.mark.shared_data
def test_prepare_again_reuses_same_utterances_and_redoes_changed_ones(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(LIBRI / "LibriSpeech", source / "LibriSpeech")
    prepare_librispeech(tmp_path, source, vocab_size=60, name="s", workers=1)
    out = tmp_path / "s"
    dev_stamp, test_stamp = ((out / f"{s}.feats.bin").stat().st_mtime_ns for s in ("dev-clean", "test-clean"))
    # The same utterances: nothing is computed again.
    prepare_librispeech(tmp_path, source, vocab_size=60, name="s", workers=1)
    assert (out / "test-clean.feats.bin").stat().st_mtime_ns == test_stamp
    # test-clean loses an utterance: that split is prepared again, the unchanged one is kept.
    trans = next((source / "LibriSpeech/test-clean").rglob("*.trans.txt"))
    lines = trans.read_text().splitlines()
    trans.write_text("\n".join(lines[1:]) + "\n")
    meta = prepare_librispeech(tmp_path, source, vocab_size=60, name="s", workers=1)
    assert meta["utterances"]["test-clean"] == 3
    assert len(feature_array(out / "test-clean.feats")) == 3
    assert len((out / "test-clean.tgt.txt").read_text().splitlines()) == 3
    assert (out / "dev-clean.feats.bin").stat().st_mtime_ns == dev_stamp


@pytest.mark.shared_data
def test_same_audio_prepared_from_two_folders_has_one_fingerprint(tmp_path):
    """A run record's corpus fingerprint names the corpus, not the folder its audio was read from."""
    metas = []
    for place in ("a/b", "c"):
        source = tmp_path / place / "src"
        shutil.copytree(LIBRI / "LibriSpeech", source / "LibriSpeech")
        metas.append(prepare_librispeech(tmp_path / place / "data", source, vocab_size=60, name="s", workers=1))
    assert metas[0]["provenance"] != metas[1]["provenance"]
    assert corpus_fingerprint("s", metas[0]) == corpus_fingerprint("s", metas[1])


def test_wer_cases():
    assert wer(["the cat sat"], ["THE CAT SAT"]) == 0.0
    assert edit_distance("a b c".split(), "a x c d".split()) == 2
    assert wer(["a b c"], ["a x c d"]) == pytest.approx(50.0)        # 1 substitution + 1 deletion of 4 words
    assert wer(["", "x y"], ["one two", "x y"]) == pytest.approx(50.0)  # 2 deletions of 4 words
    assert wer(["it's here!"], ["IT'S HERE"]) == 0.0                  # same normalisation on both sides


def test_spec_augment_masks_within_policy():
    torch.manual_seed(0)
    x = torch.randn(300, 80)
    y = spec_augment(x)
    zero_cols = (y == 0).all(0).sum().item()
    zero_rows = (y == 0).all(1).sum().item()
    assert 0 < zero_cols <= 2 * 26 and 0 < zero_rows <= 2 * 99  # widths in [0, F) and [0, T), as fairseq draws them
    assert torch.equal(y[y != 0], x[y != 0])
    for seed in range(20):  # time_p bounds each time mask at a share of the utterance: 0.08 of 300 frames is 24
        torch.manual_seed(seed)
        y = spec_augment(x, freq_masks=0, time_p=0.08)
        assert (y == 0).all(1).sum().item() <= 2 * 23
    assert torch.equal(spec_augment(x[:10], freq_masks=0, time_p=0.08), x[:10])  # under one frame: no time mask


@pytest.mark.shared_data
def test_tiny_asr_train_decode_wer(speech_root, tmp_path):
    results, run = tmp_path / "results", tmp_path / "run"
    common = ["--root", str(speech_root), "--results", str(results)]
    r = runner.invoke(app, ["train", str(REPO / "recipes/librispeech/6L-6L-b2t.yaml"), "--scale", "tiny",
                            "--run-dir", str(run), "--set", "model.encoder_layers=2", "--set", "model.decoder_layers=1",
                            "--set", "data.train_split=test-clean", *common])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["evaluate", str(run), *common])
    assert r.exit_code == 0, r.output
    m = json.loads((run / "metrics.json").read_text())
    assert m["splits"]["dev-clean"]["wer"] >= 0
    assert len((run / "hyp.dev-clean.txt").read_text().splitlines()) == 2
    csv = runner.invoke(app, ["table", "4", "--scale", "tiny", "--format", "csv", "--results", str(results)]).output
    assert "4,6L-6L,b2t,Dev clean,3.69," in csv and "4,12L-6L,pre_ln,Test other,8.22,,tiny,not run" in csv


@pytest.mark.shared_data
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed (.ci/run installs it)")
def test_speech_mini_goes_through_librispeech_path(tmp_path):
    from repro.data.speech_mini import prepare_speech_mini
    meta = prepare_speech_mini(tmp_path, SHARED_DATA / "multi30k", vocab_size=80, train=10, dev=2, test=2)
    assert meta["corpus"] == "speech_mini" and meta["utterances"] == {"train": 10, "dev": 2, "test": 2}
    speakers = {s: {p.name for p in (tmp_path / "downloads/speech_mini/LibriSpeech" / s).iterdir()}
                for s in ("train", "dev", "test")}
    assert not (speakers["train"] & speakers["dev"]) and not (speakers["train"] & speakers["test"])
    info = sf.info(next((tmp_path / "downloads/speech_mini").rglob("*.flac")))
    assert info.samplerate == 16000 and info.format == "FLAC"
    transcripts = (tmp_path / "downloads/speech_mini/LibriSpeech").rglob("*.trans.txt")
    assert all(len(line.split()) - 1 <= 9 for t in transcripts for line in t.read_text().splitlines())
    # Audio on disk made with other settings would be reused under the wrong names: it is refused instead.
    from repro.data.speech_mini import synthesise_corpus
    with pytest.raises(PrepareError, match="other settings"):
        synthesise_corpus(SHARED_DATA / "multi30k", tmp_path / "downloads/speech_mini", 11, 2, 2)
