"""The prepared corpora that recipes name, and the command that prepares each (hints in errors name these)."""

from __future__ import annotations

from pathlib import Path

PREPARE_COMMANDS = {
    "wmt16_ende": "lnrepro prepare wmt",
    "wmt_sample": "lnrepro prepare wmt-sample --source ../shared/data",
    "multi30k": "lnrepro prepare multi30k --source ../shared/data/multi30k",
    "gigaword": "lnrepro prepare gigaword",
    "gigaword_sample": "lnrepro prepare gigaword --source ../shared/data/gigaword",
    "wikitext103": "lnrepro prepare wikitext103",
    "wikitext103_mini": "lnrepro prepare wikitext103 --source ../shared/data/wikitext103",
    "librispeech": "lnrepro prepare librispeech",
    "speech_mini": "lnrepro prepare speech-mini --source ../shared/data/multi30k",
    "tiny_parallel": "lnrepro prepare tiny",
    "tiny_lm": "lnrepro prepare tiny",
    "tiny_speech": "lnrepro prepare tiny --source ../shared/data/librispeech",
}


def prepare_command(corpus: str) -> str:
    return PREPARE_COMMANDS.get(corpus, "lnrepro prepare DATASET (see lnrepro prepare --help)")


def unprepared(corpora: set[str], data_root: Path) -> list[str]:
    """The corpora of `corpora` not prepared under `data_root` (no meta.json there; a run checks the files)."""
    return sorted(c for c in corpora if not (Path(data_root) / c / "meta.json").is_file())


def not_prepared_message(missing: list[str], data_root: Path) -> str:
    return (f"--root {data_root}: not prepared there: "
            + "; ".join(f"{c} (`{prepare_command(c)} --root {data_root}`)" for c in missing))


def check_prepared(corpora: set[str], data_root: Path) -> None:
    """Before a launch trains anything: every corpus its runs name is prepared under `data_root`, else one
    ValueError naming each missing corpus and the command that prepares it, so that a fresh machine learns it at
    once and not from each run's log hours apart."""
    missing = unprepared(corpora, data_root)
    if missing:
        raise ValueError(not_prepared_message(missing, data_root))
