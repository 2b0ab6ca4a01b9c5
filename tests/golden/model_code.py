"""Regenerate tests/golden/model_code.json: each variant's outputs at a fixed seed (an encoder-decoder and a language
model, 2+2 layers, d 16, eval mode) and the model-code version they were made at. Run it after bumping a version in
repro/model/version.py, never to silence tests/test_model_code.py without one."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_model_code import fingerprint  # noqa: E402

from repro.model import version  # noqa: E402
from repro.model.variants import VARIANTS  # noqa: E402

out = {name: {"version": version.current(name), **fingerprint(name)} for name in VARIANTS}
(Path(__file__).parent / "model_code.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
print("wrote tests/golden/model_code.json")
