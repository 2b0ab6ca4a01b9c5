"""What `lnrepro score-fairseq` does: translate sentences (a file, or a SacreBLEU test set) with a fairseq checkpoint
read into lnrepro's model (repro/eval/fairseq_import.py) and lnrepro's beam search, and score them with SacreBLEU.
Every refusal is a ValueError of one line naming the option or file at fault."""

from __future__ import annotations

import math
from pathlib import Path

from repro.progress import console


def score(checkpoint: Path, dictionary: Path, variant: str | None, source: Path | None, reference: Path | None,
          test_set: str | None, langpair: str, bpe_codes: Path | None, tokenizer: str, beam: int, lenpen: float,
          max_len: tuple[float, int], out: Path | None) -> str | None:
    """Translate and write the hypotheses to `out` where given; returns the BLEU line where references are known.
    `max_len`: fairseq's max-len-a and -b (an output is at most a * source tokens + b)."""
    from repro.eval import fairseq_import as fi
    from repro.files import atomic_write_text
    from repro.progress import progress_bar
    check(checkpoint, dictionary, source, test_set, bpe_codes, lenpen, max_len[0], out)
    src_lang, _, tgt_lang = langpair.partition("-")
    lines, references = sentences(source, reference, test_set, langpair)
    pipeline = fi.TextPipeline(src_lang, tgt_lang, tokenizer, bpe_codes)
    model, read_as = fi.load_model(checkpoint, variant)
    symbols = fi.read_dictionary(dictionary)
    fi.check_dictionary(symbols, model, dictionary, checkpoint)
    with progress_bar("translate", len(lines)) as bar:
        outputs = fi.translate(model, symbols, [pipeline.encode(line) for line in lines], beam, lenpen, *max_len,
                               progress=bar.advance)
    hypotheses = [pipeline.decode(h) for h in outputs]
    if out is not None:
        atomic_write_text(out, "".join(h + "\n" for h in hypotheses))
    console.print(f"{checkpoint} read as {read_as}: {len(hypotheses)} sentences translated"
                  + (f", written to {out}" if out else ""), soft_wrap=True)
    if references is None:
        return None
    from repro.eval.metrics import bleu
    value, signature = bleu(hypotheses, references)
    return f"BLEU {value:.2f} ({signature})"


def check(checkpoint: Path, dictionary: Path, source: Path | None, test_set: str | None, bpe_codes: Path | None,
          lenpen: float, max_len_a: float, out: Path | None) -> None:
    """The options, checked before any test set is downloaded or checkpoint read."""
    if (source is None) == (test_set is None):
        raise ValueError("give the sentences with --source FILE or --test-set NAME (one of them)")
    for path, option in ((checkpoint, "checkpoint"), (dictionary, "--dict"), (bpe_codes, "--bpe-codes")):
        if path is not None and not Path(path).is_file():
            raise ValueError(f"{option} {path}: no such file")
    if out is not None and Path(out).is_dir():
        raise ValueError(f"--out {out}: a folder; give a file to write the hypotheses to")
    if not math.isfinite(lenpen):
        raise ValueError(f"--lenpen {lenpen}: a finite number (the authors: 0.6 or 1.0)")
    if not (math.isfinite(max_len_a) and 0 <= max_len_a <= 100):
        raise ValueError(f"--max-len-a {max_len_a}: from 0 to 100 (fairseq's generate.py: 0)")


def sentences(source: Path | None, reference: Path | None, test_set: str | None,
              langpair: str) -> tuple[list[str], list[str] | None]:
    """The sentences to translate and their references (None where none are given)."""
    if test_set is not None:
        lines, references = sacrebleu_test_set(test_set, langpair)
    else:
        lines = read_lines(source, "--source")
        if not lines:
            raise ValueError(f"--source {source}: no sentence in it")
        references = read_lines(reference, "--reference") if reference is not None else None
    if references is not None and len(references) != len(lines):
        raise ValueError(f"{len(lines)} sources but {len(references)} references")
    return lines, references


def read_lines(path: Path, option: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{option} {path}: cannot be read ({type(e).__name__})") from None


def sacrebleu_test_set(name: str, langpair: str) -> tuple[list[str], list[str]]:
    """A SacreBLEU test set's sources and first references (SacreBLEU downloads it once into ~/.sacrebleu)."""
    from sacrebleu.dataset import DATASETS
    if name not in DATASETS:
        raise ValueError(f"--test-set {name!r}: not a SacreBLEU test set (e.g. wmt14/full, wmt16)")
    data = DATASETS[name]
    try:
        src = data.get_source_file(langpair)
        ref = data.get_reference_files(langpair)[0]
    except Exception as e:  # SacreBLEU's download errors come in several kinds
        raise ValueError(f"--test-set {name} {langpair}: SacreBLEU could not provide it ({type(e).__name__}: {e})") from None
    return read_lines(Path(src), "--test-set"), read_lines(Path(ref), "--test-set")
