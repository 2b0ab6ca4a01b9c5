"""The README routes and its one generated block is the command's own; the generated pages are what `lnrepro report`
writes from the records and the commands today, so a record added, or an option changed, without regenerating them
fails here."""

from pathlib import Path

import typer
from rich.console import Console

import repro.progress
from repro.cli import app
from repro.report import (README_BLOCKS, help_page, block_markers, readme_with_blocks, render_headline,
                          render_results_page)

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_readme_is_short_and_its_first_screen_says_what_and_how():
    lines = README.splitlines()
    assert len(lines) <= 250
    first = "\n".join(lines[:40])
    for text in ("Takase", "make demo", "make test", "lnrepro reproduce"):
        assert text in first, text


def test_readme_generated_blocks_are_the_command_output():
    assert README.count("| claim | paper | seeds per cell |") == 1, "the claims table stands once, in the generated block"
    for name in README_BLOCKS:
        assert all(README.count(marker) == 1 for marker in block_markers(name)), name
    assert README == readme_with_blocks(README, REPO / "results"), (
        "README's generated blocks differ from `lnrepro report`'s: run lnrepro report\n"
        + render_headline(REPO / "results", "mini"))


def test_results_page_is_what_report_writes(monkeypatch):
    monkeypatch.setattr(repro.progress, "console", Console(stderr=True, force_terminal=False))
    page = (REPO / "docs" / "results-mini.md").read_text()
    assert page == render_results_page(REPO / "results", "mini"), "docs/results-mini.md is stale: run lnrepro report"


def test_cli_page_is_what_report_writes():
    assert (REPO / "docs" / "cli.md").read_text() == help_page(typer.main.get_command(app)), "docs/cli.md is stale: run lnrepro report"


def test_every_page_the_readme_names_exists():
    import re
    for link in re.findall(r"\]\(((?:docs|benchmarks)/[^)]+)\)", README):
        assert (REPO / link).is_file(), link


def test_pages_show_text_from_files_literally_and_other_results_leave_the_readme_alone(tmp_path):
    from typer.testing import CliRunner

    from repro.cli import app
    from repro.markdown import escape
    assert escape("a|b <script>x</script>\n<img onerror=y> & <!--") == \
        "a\\|b &lt;script&gt;x&lt;/script&gt; &lt;img onerror=y&gt; &amp; &lt;!--"
    before = (REPO / "README.md").stat().st_mtime_ns
    (tmp_path / "results").mkdir()
    r = CliRunner().invoke(app, ["report", "--results", str(tmp_path / "results"), "--docs", str(tmp_path / "docs")])
    assert r.exit_code == 0 and "README.md left as it is" in r.output
    assert (REPO / "README.md").stat().st_mtime_ns == before and (tmp_path / "docs" / "results-mini.md").is_file()
