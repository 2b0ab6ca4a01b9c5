"""Score a fairseq Transformer checkpoint with lnrepro's model and beam search (`lnrepro score-fairseq`).

A checkpoint of fairseq 0.9 (the authors' fork among them) keeps its training arguments as an argparse.Namespace
(`args`); fairseq 0.10 to 0.12 keep a plain dict (`cfg`, whose `model` part holds them). The architecture (depths,
widths, heads, where the norms sit) is read from them and from the weights, the weights are mapped onto the
matching lnrepro variant (repro/model/fairseq_weights.py), and sentences are translated as the authors scored them:
Moses tokenisation of the source (sacremoses, aggressive dash splits, as fairseq's prepare-wmt14en2de.sh), their
subword-nmt BPE codes, beam search with fairseq's generate.py defaults (beam 4 here, output at most 200 tokens,
the length penalty given), BPE removed ("@@ "), Moses detokenisation, SacreBLEU.
"""

from __future__ import annotations

import copyreg
import pickle
import re
import types
import typing
from argparse import Namespace
from collections import OrderedDict, defaultdict
from pathlib import Path

import numpy
import torch

try:
    from numpy._core.multiarray import scalar as numpy_scalar
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import scalar as numpy_scalar

from repro.data.text import EOS, PAD, UNK
from repro.eval.generate import beam_search
from repro.model.fairseq_weights import from_fairseq
from repro.model.seq2seq import EncoderDecoder
from repro.model.variants import get_variant

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's Dictionary: ids 0-3, lnrepro's BOS, PAD, EOS, UNK


class FairseqImportError(ValueError):
    pass


class _Unknown:
    """Stand-in for omegaconf's classes in a fairseq 0.10-0.12 `cfg`: its state kept as data, so that a checkpoint
    loads without omegaconf and none of omegaconf's code runs."""

    def __init__(self, *args, **kwargs):
        self.args, self.state = args, kwargs or None

    def __setstate__(self, state):
        self.state = state


_OMEGACONF = ("omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig", "omegaconf.base.Metadata",
              "omegaconf.base.ContainerMetadata", "omegaconf.nodes.AnyNode", "omegaconf.nodes.StringNode",
              "omegaconf.nodes.IntegerNode", "omegaconf.nodes.FloatNode", "omegaconf.nodes.BooleanNode")
_DATA_TYPES = {"dict": dict, "list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "int": int,
               "long": int, "float": float, "str": str, "unicode": str, "bool": bool, "bytes": bytes}
# Exactly the globals a fairseq 0.9-0.12 checkpoint holds (tensor rebuilds, its arguments, omegaconf's containers as
# stand-ins, numpy scalars in its extra state), never a whole module: a name outside this table is refused.
ALLOWED = {
    ("collections", "OrderedDict"): OrderedDict, ("collections", "defaultdict"): defaultdict,
    ("argparse", "Namespace"): Namespace, ("copyreg", "_reconstructor"): copyreg._reconstructor,
    ("typing", "Any"): typing.Any,
    ("torch._utils", "_rebuild_tensor"): torch._utils._rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
    ("numpy", "dtype"): numpy.dtype, ("numpy.core.multiarray", "scalar"): numpy_scalar,
    ("numpy._core.multiarray", "scalar"): numpy_scalar,
    **{(module, name): kind for module in ("builtins", "__builtin__") for name, kind in _DATA_TYPES.items()},
    **{tuple(path.rsplit(".", 1)): type(path.rsplit(".", 1)[1], (_Unknown,), {}) for path in _OMEGACONF},
}


class RefusedGlobal(pickle.UnpicklingError):
    pass


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise RefusedGlobal(f"{module}.{name}") from None


_allowlist_pickle = types.ModuleType("pickle")
_allowlist_pickle.Unpickler = _Unpickler
_allowlist_pickle.load = lambda f, **kw: _Unpickler(f, **kw).load()
_allowlist_pickle.__name__ = "lnrepro_allowlist_pickle"


def _plain(obj):
    """An omegaconf node (kept as _Unknown) as plain Python: a DictConfig's `_content`, a value node's `_val`."""
    if isinstance(obj, _Unknown):
        state = obj.state if isinstance(obj.state, dict) else {}
        if "_content" in state:
            return _plain(state["_content"])
        if "_val" in state:
            return _plain(state["_val"])
        return state
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, Namespace):
        return vars(obj)
    return obj


def read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """The checkpoint's model weights and its model arguments (a dict)."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_allowlist_pickle)
    except RefusedGlobal as e:
        raise FairseqImportError(f"{path}: refused: it names the global {e}, which no fairseq checkpoint needs "
                                 f"(a checkpoint is read as data only)") from None
    except (OSError, RuntimeError, pickle.UnpicklingError, EOFError) as e:
        raise FairseqImportError(f"{path}: not a readable checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise FairseqImportError(f"{path}: not a fairseq checkpoint (no 'model' weights)")
    if state.get("args") is not None:
        args = _plain(state["args"])
    elif state.get("cfg") is not None:
        cfg = _plain(state["cfg"])
        args = cfg.get("model") or {}
        args = _plain(args) if not isinstance(args, dict) else args
    else:
        raise FairseqImportError(f"{path}: keeps neither 'args' (fairseq 0.9) nor 'cfg' (0.10-0.12)")
    return state["model"], args


def variant_of(args: dict) -> str:
    """lnrepro's variant for a checkpoint's arguments: Pre-LN where the norms come first, B2T where an argument
    named for the bottom-to-top connection is on (the authors' fork), else Post-LN."""
    if args.get("encoder_normalize_before") or args.get("decoder_normalize_before"):
        return "pre_ln"
    if any("bottom_to_top" in k and v for k, v in args.items()):
        return "b2t"
    return "post_ln"


def read_dictionary(path: Path) -> list[str]:
    """fairseq's dict.txt ("<symbol> <count>" per line) as the list of symbols by id, its four specials first."""
    symbols = list(SPECIALS)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise FairseqImportError(f"{path}: cannot read the dictionary ({type(e).__name__})") from None
    for n, line in enumerate(lines, 1):
        parts = line.rstrip().rsplit(" ", 2)
        if parts and parts[-1] == "#fairseq:overwrite":
            parts = parts[:-1]
        if len(parts) != 2 or not parts[1].isdigit():
            raise FairseqImportError(f"{path}: line {n} is not '<symbol> <count>'")
        symbols.append(parts[0])
    return symbols


def check_dictionary(symbols: list[str], model: EncoderDecoder, dictionary: Path, checkpoint: Path) -> None:
    """The dictionary is the checkpoint's: its symbols (the four specials with them) fill the embedding, up to
    fairseq's padding of the table to a multiple of 8 (`madeupword` rows): more would index past it, far fewer
    would translate every word as another's."""
    rows = model.embed_tokens.weight.shape[0]
    if not len(symbols) <= rows < len(symbols) + 8:
        raise FairseqImportError(f"{dictionary}: {len(symbols) - len(SPECIALS)} symbols (and fairseq's four "
                                 f"specials) for an embedding of {rows} rows in {checkpoint}: not this checkpoint's "
                                 f"dictionary")


def load_model(checkpoint: Path, variant: str | None = None) -> tuple[EncoderDecoder, str]:
    """lnrepro's model holding the checkpoint's weights, and the variant it was read as."""
    state, args = read_checkpoint(checkpoint)
    variant = variant or variant_of(args)
    get_variant(variant)
    embedding = next((state[k] for k in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight") if k in state),
                     None)
    if embedding is None:
        raise FairseqImportError(f"{checkpoint}: no token embedding in its weights")
    depth = lambda side: len({m[1] for k in state if (m := re.match(rf"{side}\.layers\.(\d+)\.", k))})
    fc1 = state.get("encoder.layers.0.fc1.weight")
    heads = args.get("encoder_attention_heads")
    if fc1 is None or not heads:
        raise FairseqImportError(f"{checkpoint}: cannot tell its FFN width or its attention heads")
    model = EncoderDecoder(get_variant(variant), embedding.shape[0], PAD, embedding.shape[1], fc1.shape[0],
                           int(heads), depth("encoder"), depth("decoder"), dropout=0.0)
    try:
        mapped = from_fairseq(state, variant)
    except ValueError as e:
        raise FairseqImportError(f"{checkpoint}: {e}") from None
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    computed = {n for n, _ in model.named_buffers()}  # constants lnrepro computes from the depths
    if unexpected or set(missing) - computed:
        raise FairseqImportError(f"{checkpoint}: its weights do not fit {variant} "
                                 f"(missing {sorted(set(missing) - computed)[:3]}, unexpected {unexpected[:3]})")
    return model.eval(), variant


class TextPipeline:
    """Moses tokenisation and BPE on the source, BPE removal and Moses detokenisation on the output; each step off
    where not asked for (`tokenizer` "none", no `bpe_codes`)."""

    def __init__(self, source_lang: str, target_lang: str, tokenizer: str = "moses", bpe_codes: Path | None = None):
        if tokenizer not in ("moses", "none"):
            raise FairseqImportError(f"--tokenizer {tokenizer!r}: expected moses or none")
        self.moses = tokenizer == "moses"
        if self.moses:
            from sacremoses import MosesDetokenizer, MosesTokenizer
            self.tok, self.detok = MosesTokenizer(lang=source_lang), MosesDetokenizer(lang=target_lang)
        self.bpe = None
        if bpe_codes is not None:
            from subword_nmt.apply_bpe import BPE
            try:
                merges = [l for l in Path(bpe_codes).read_text(encoding="utf-8").splitlines()
                          if l.strip() and not l.startswith("#version")]
            except (OSError, UnicodeDecodeError) as e:
                raise FairseqImportError(f"{bpe_codes}: cannot read the BPE codes ({type(e).__name__})") from None
            if not merges:
                raise FairseqImportError(f"{bpe_codes}: no BPE merge in it (subword-nmt codes: one pair per line)")
            try:
                with open(bpe_codes, encoding="utf-8") as f:
                    self.bpe = BPE(f)
            except (OSError, UnicodeDecodeError) as e:
                raise FairseqImportError(f"{bpe_codes}: cannot read the BPE codes ({type(e).__name__})") from None

    def encode(self, line: str) -> str:
        if self.moses:
            line = self.tok.tokenize(line, aggressive_dash_splits=True, return_str=True, escape=False)
        return self.bpe.process_line(line) if self.bpe else line

    def decode(self, line: str) -> str:
        if self.bpe:
            line = (line + " ").replace("@@ ", "").rstrip()
        return self.detok.detokenize(line.split()) if self.moses else line


def translate(model: EncoderDecoder, symbols: list[str], lines: list[str], beam: int = 4, lenpen: float = 1.0,
              max_len_a: float = 0.0, max_len_b: int = 200, batch_sentences: int = 32, progress=None) -> list[str]:
    """Each line (already tokenised and split into the dictionary's symbols) translated, as a line of symbols:
    fairseq's encode_line (unknown symbols to <unk>, </s> appended) and generate.py's output length
    (max_len_a * source tokens + max_len_b)."""
    index = {}
    for i, s in enumerate(symbols):
        index.setdefault(s, i)
    ids = [[index.get(w, UNK) for w in line.split()] + [EOS] for line in lines]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    out: dict[int, str] = {}
    for start in range(0, len(order), batch_sentences):
        chunk = order[start:start + batch_sentences]
        src = torch.full((len(chunk), max(len(ids[i]) for i in chunk)), PAD, dtype=torch.long)
        for row, i in enumerate(chunk):
            src[row, :len(ids[i])] = torch.tensor(ids[i])
        lengths = src.ne(PAD).sum(1)
        max_len = (max_len_a * lengths.float() + max_len_b).long()
        for i, tokens in zip(chunk, beam_search(model, src, beam, max_len, lenpen)):
            out[i] = " ".join(symbols[t] if t < len(symbols) else SPECIALS[UNK] for t in tokens)
        if progress is not None:
            progress(len(chunk))
    return [out[i] for i in range(len(lines))]
