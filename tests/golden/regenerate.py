"""Regenerate the golden Markdown of Table 1 from the fixture records in tests/test_tables.py (exact match)."""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_tables import fixture_records  # noqa: E402

from repro.tables.render import render_table  # noqa: E402

with tempfile.TemporaryDirectory() as d:
    fixture_records(Path(d))
    (Path(__file__).parent / "table1_mini.md").write_text(render_table(1, scale="mini", fmt="markdown", results_dir=Path(d)))
print("wrote tests/golden/table1_mini.md")
