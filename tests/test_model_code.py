"""The model-code version moves with the model: a variant whose outputs at a fixed seed changed must have a newer
version in repro/model/version.py (then `python tests/golden/model_code.py` records the new outputs), and records
carry the version they trained at."""

import json
from pathlib import Path

import pytest
import torch

from repro.model import version
from repro.model.init import apply_variant_init
from repro.model.lm import LanguageModel
from repro.model.seq2seq import EncoderDecoder
from repro.model.variants import VARIANTS

GOLDEN = Path(__file__).parent / "golden" / "model_code.json"


def fingerprint(name: str) -> dict[str, list[float]]:
    """A few numbers that move with any change to a variant's parameters, initialisation or forward: its parameter
    count, and the mean, spread and first values of its logits on a fixed batch (an encoder-decoder, in eval mode
    and in training mode with dropout, its gates opened) and of its log-probabilities (a language model)."""
    v = VARIANTS[name]
    torch.manual_seed(0)
    seq = EncoderDecoder(v, 40, 1, 16, 32, 2, 2, 2, 0.3)
    apply_variant_init(seq, [seq.embed_tokens])
    torch.manual_seed(1)
    lm = LanguageModel(v, 60, 1, 16, 32, 2, 2, 0.0, 0.0, 0.0, [20, 40], 2.0)
    apply_variant_init(lm, list(lm.embed_tokens.embeddings[:1]))
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(4, 40, (3, 7), generator=g), torch.randint(4, 40, (3, 6), generator=g)
    tokens = torch.randint(4, 60, (2, 9), generator=g)
    first = lambda out: out[0] if isinstance(out, tuple) else out
    summary = lambda t: [t.mean().item(), t.std().item(), *t.flatten()[:4].tolist()]
    with torch.no_grad():
        logits = first(seq.eval()(src, tgt))
        lp = lm.eval().target_log_probs(tokens[:, :-1], tokens[:, 1:])
        for n, p in seq.named_parameters():
            if n.endswith("residual.alpha") and v.residual == "rezero":
                p.fill_(0.5)
        torch.manual_seed(3)
        trained = first(seq.train()(src, tgt))
    sizes = lambda m: [float(len(list(m.parameters()))), float(sum(p.numel() for p in m.parameters()))]
    return {"params": sizes(seq) + sizes(lm), "seq2seq": summary(logits), "seq2seq_dropout": summary(trained),
            "lm": summary(lp)}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_variant_whose_outputs_changed_has_a_newer_version(name):
    golden = json.loads(GOLDEN.read_text())[name]
    now = fingerprint(name)
    same = all(torch.allclose(torch.tensor(now[k]), torch.tensor(golden[k]), rtol=1e-4, atol=1e-5) for k in now)
    if version.current(name) == golden["version"]:
        assert same, (f"{name}'s outputs at a fixed seed changed but its model-code version is still "
                      f"{golden['version']}: add a Change to repro/model/version.py, then run "
                      f"tests/golden/model_code.py")
    else:
        pytest.fail(f"{name}'s version is {version.current(name)}, the golden outputs were made at "
                    f"{golden['version']}: run tests/golden/model_code.py")


def test_records_carry_the_version_or_get_it_from_their_commit():
    assert version.current("rezero") == "2026-12-03" and version.current("dlcl") == "2026-11-29"
    assert version.of_record({"model_code": "2026-12-03", "variant": "b2t"}) == "2026-12-03"
    # fa84ff6 brought the position fix; its parent is older, this checkout's HEAD newer
    assert version.at_commit("b2t", "fa84ff6") == "2026-11-29"
    assert version.at_commit("b2t", "fa84ff6~1") == "2026-11-23"
    assert version.at_commit("b2t", "not-a-commit") == "unknown"
    status = {"segments": [{"commit": "fa84ff6~1"}, {"commit": "x", "model_code": "2026-12-03"}]}
    assert version.of_status(status, "b2t") == "mixed (2026-11-23, 2026-12-03)"
    assert version.of_status({"commit": "fa84ff6", "model_code": "2026-12-03"}, "b2t") == "2026-12-03"
