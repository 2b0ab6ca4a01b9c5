"""`lnrepro evaluate RUN`: average the last N checkpoints, decode or score each test split, write metrics.json."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch

from repro.config import recipe_of_run
from repro.data.corpora import prepare_command
from repro.data.text import PAD, read_meta
from repro.eval import metrics
from repro.eval.generate import beam_search
from repro.model.build import build_model
from repro.model.cpu_paths import keep_freed_memory
from repro.progress import console, progress_bar
from repro.data.text import corpus_fingerprint
from repro.files import read_json
from repro.provenance import hardware
from repro.train import checkpoint
from repro.train.loop import source_blind_nll, validate
from repro.train.tasks import batch_tokens, open_split, to_device


class EvaluateError(RuntimeError):
    pass


def load_run(run_dir: Path):
    status_path = run_dir / "status.json"
    if not status_path.is_file():
        raise EvaluateError(f"{run_dir}: not a finished run (status.json missing); train it first")
    status = read_json(status_path)
    if not isinstance(status, dict):
        raise EvaluateError(f"{status_path}: not a run's status (expected a JSON object, found "
                            f"{type(status).__name__})")
    for key, kind in (("status", str), ("recipe", str), ("scale", str)):
        if not isinstance(status.get(key), kind):
            raise EvaluateError(f"{status_path}: {key}: {status.get(key)!r} is not a {kind.__name__}; the file is "
                                f"not one `lnrepro train` wrote")
    if "recipes" not in Path(status["recipe"]).resolve().parts:  # a record is filed by its path below recipes/
        raise EvaluateError(f"{status_path}: recipe: {status['recipe']!r} is not a recipe below a recipes/ folder")
    if not isinstance(status.get("overrides", []), list):
        raise EvaluateError(f"{status_path}: overrides: {status['overrides']!r} is not a list")
    return status, recipe_of_run(run_dir, status)


def decode_split(model, data, sp, recipe, split: str, device) -> list[str]:
    e = recipe.eval
    lenpen = e.lenpen_by_split.get(split, e.lenpen)
    hyps: dict[int, str] = {}
    order = np.argsort(-data.src.sizes, kind="stable")  # long first: similar lengths share a batch
    batches = [order[i:i + e.batch_sentences] for i in range(0, len(order), e.batch_sentences)]
    with progress_bar(f"decode {split}", len(order)) as bar:
        for idx in batches:
            batch = to_device(data.collate(idx), device)
            src_len = batch["src_lengths"] if "src_lengths" in batch else batch["src"].ne(PAD).sum(1)
            max_len = (e.max_len_a * src_len.float() + e.max_len_b).long()
            out = beam_search(model, batch["src"], e.beam, max_len, lenpen, src_lengths=batch.get("src_lengths"))
            for i, toks in zip(idx.tolist(), out):
                hyps[i] = sp.decode(toks)
            bar.advance(len(idx))
    return [hyps[i] for i in range(len(order))]


def evaluate_run(run_dir: Path, data_root: Path, write: bool = True, loaded: tuple | None = None) -> dict:
    """`loaded`: the (status, recipe) load_run gave the caller, so that the run's status is read once."""
    run_dir = Path(run_dir)
    status, resolved = loaded or load_run(run_dir)
    if status["status"] != "completed":
        return {"status": status["status"], "reason": status.get("reason", "")}
    r = resolved.recipe
    corpus_dir = Path(data_root) / r.data.corpus
    meta = read_meta(corpus_dir)
    trained_on, here = status.get("data"), corpus_fingerprint(r.data.corpus, meta)
    if trained_on and trained_on != here:
        raise EvaluateError(f"{corpus_dir}: prepared otherwise (files {here['files_sha256']}) than the corpus this run "
                            f"trained on (files {trained_on['files_sha256']}); evaluate it on that corpus")
    ckpts = checkpoint.list_checkpoints(run_dir)[-r.eval.average_last:]
    if not ckpts:
        raise EvaluateError(f"{run_dir}: no checkpoints to evaluate")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        keep_freed_memory()
    model = build_model(r, meta["vocab_size"], PAD)
    model.load_state_dict(checkpoint.average(ckpts))
    model.to(device).eval()
    t0 = time.time()
    result = {"checkpoints_averaged": [p.name for p in ckpts], "splits": {}}
    valid = open_split(r, corpus_dir, r.data.valid_split)
    result["valid_nll"] = validate(model, valid, r, device, batch_tokens(r))
    if r.task != "lm":  # judging rules v2: a sequence-to-sequence model must use its input
        result["source_blind_nll"] = source_blind_nll(model, valid, r, device, batch_tokens(r))
    if r.task in ("mt", "summarization"):  # Figure 5's data, kept in the record so the figure needs no checkpoint
        from repro.eval.similarity import layer_similarities
        result["layer_cosine"] = layer_similarities(model, valid)
    if r.task in ("mt", "summarization", "asr"):
        sp = spm.SentencePieceProcessor(model_file=str(corpus_dir / meta["spm_model"]))
        for split in r.data.test_splits:
            data = open_split(r, corpus_dir, split)
            hyps = decode_split(model, data, sp, r, split, device)
            ref_path = corpus_dir / f"{split}.tgt.txt"
            refs = ref_path.read_text(encoding="utf-8").splitlines()
            if len(refs) != len(hyps):
                raise EvaluateError(f"{ref_path}: {len(refs)} reference lines for {len(hyps)} test sentences; "
                                    f"run `{prepare_command(r.data.corpus)}` again")
            (run_dir / f"hyp.{split}.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
            if r.task == "mt":
                score, sig = metrics.bleu(hyps, refs)
                result["splits"][split] = {"bleu": score}
                result["bleu_signature"] = sig
                console.print(f"{split}: BLEU {score:.2f}  ({sig})")
            elif r.task == "summarization":
                result["splits"][split] = metrics.rouge(hyps, refs)
                console.print(f"{split}: " + ", ".join(f"{k} {v:.2f}" for k, v in result["splits"][split].items()))
            else:
                result["splits"][split] = {"wer": metrics.wer(hyps, refs)}
                console.print(f"{split}: WER {result['splits'][split]['wer']:.2f}")
        if r.task == "mt" and result["splits"]:
            result["bleu_average"] = float(np.mean([s["bleu"] for s in result["splits"].values()]))
    elif r.task == "lm":
        from repro.eval.lm_eval import sliding_window_perplexity
        for split in [r.data.valid_split, *r.data.test_splits]:
            ppl = sliding_window_perplexity(model, corpus_dir, split, r.data.tokens_per_sample,
                                            r.eval.context_window, device)
            result["splits"][split] = {"perplexity": ppl}
            console.print(f"{split}: perplexity {ppl:.2f}")
    result["eval_seconds"] = round(time.time() - t0, 1)
    # The record's `hardware` is the training machine's; a run may be evaluated elsewhere (on a CPU beside its GPU).
    result["eval_hardware"] = hardware()
    if write:
        tmp = run_dir / "metrics.json.tmp"
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        tmp.replace(run_dir / "metrics.json")
    return result
