"""Recipes: a typed schema, YAML with one level of `base:`, scale overrides kept in the recipe, `--set` overrides.

Resolution order: base <- recipe (deep merge) <- the base's scales[SCALE] <- the recipe's scales[SCALE] (no scale
block applies at paper scale) <- each `--set key=value`.
A base's scale is the regime of that scale for every recipe on it, so it comes after the recipe's own keys; it
never replaces one of them unannounced: where it would set a key the recipe sets to another value, the recipe
either says what the key is at that scale (its own `scales.SCALE`, which wins) or lists the key under
`scales_replace:` (the base's scale replaces it on purpose, e.g. Table 8's GPUs per update, which the reduced
scales set to one). Anything else is a RecipeError, so `lnrepro recipes --check` and `train` refuse it.
Every problem is a RecipeError whose message is one line naming the file, the key path, the value and what was
expected.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from repro.model.variants import VARIANTS

TASKS = ("mt", "summarization", "lm", "asr")
SCALES = ("paper", "mini", "tiny")
# What a scale's runs are, where its recipes' description still names the paper-scale data (tiny keeps the base's
# description: its text is part of every recipe's hash)
SCALE_NOTES = {"tiny": "generated data (lnrepro prepare tiny; the tests make it), a few updates a run, seconds; "
                       "trained far longer, a run can stop by the stuck-loss failure rule, by design: the data is "
                       "learned in seconds"}
PRECISIONS = ("fp32", "bf16", "fp16")


class RecipeError(ValueError):
    """A recipe that cannot be used; the message is the one line shown to the user (a huge value in it is cut, so
    that the line still names the file and the key)."""

    MAX = 400

    def __init__(self, message: str):
        super().__init__(message if len(message) <= self.MAX else message[:self.MAX] + "…")


@dataclass(frozen=True)
class Range:
    """Allowed values of a number: from lo to hi (None: unbounded), each end closed unless marked open."""
    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False
    open_hi: bool = False

    def __contains__(self, v) -> bool:
        return ((self.lo is None or (v > self.lo if self.open_lo else v >= self.lo))
                and (self.hi is None or (v < self.hi if self.open_hi else v <= self.hi)))

    def __str__(self) -> str:
        num = lambda v: str(int(v)) if float(v).is_integer() else f"{v:g}"
        lo = "-inf" if self.lo is None else num(self.lo)
        hi = "inf" if self.hi is None else num(self.hi)
        return f"{'(' if self.open_lo or self.lo is None else '['}{lo}, {hi}{')' if self.open_hi or self.hi is None else ']'}"


POSITIVE = Range(1)
FRACTION = Range(0, 1, open_hi=True)
LAYERS, WIDTH, COUNT = Range(1, 1000), Range(1, 65536), Range(1, 10 ** 9)  # beyond them a run cannot be built
# The valid range of every numeric recipe key (every float must also be finite).
RANGES = {
    "data.max_tokens": COUNT, "data.max_source_positions": COUNT, "data.tokens_per_sample": COUNT,
    "model.encoder_layers": Range(0, 1000), "model.decoder_layers": LAYERS, "model.d_model": WIDTH,
    "model.ffn_dim": Range(1, 10 ** 6), "model.heads": Range(1, 1024), "model.dropout": FRACTION,
    "model.attention_dropout": FRACTION, "model.activation_dropout": FRACTION,
    "model.adaptive_softmax_dropout": FRACTION, "model.adaptive_factor": Range(1), "model.input_features": WIDTH,
    "model.conv_channels": WIDTH,
    "optim.lr": Range(0, 1, open_lo=True), "optim.eps": Range(0, 1, open_lo=True, open_hi=True),
    "optim.weight_decay": FRACTION, "optim.warmup_updates": POSITIVE, "optim.warmup_init_lr": Range(0, 1),
    "optim.decay_period": COUNT, "optim.max_updates": COUNT, "optim.clip_norm": Range(0),
    "optim.label_smoothing": FRACTION, "optim.gpus_per_update": Range(1, 100000),
    "train.seed": Range(0, 2 ** 32 - 1), "train.log_interval": POSITIVE, "train.validate_interval": POSITIVE,
    "train.save_interval": POSITIVE, "train.keep_last": POSITIVE, "train.divergence_window": POSITIVE,
    "eval.beam": POSITIVE, "eval.lenpen": Range(), "eval.average_last": POSITIVE, "eval.max_len_a": Range(0, 100),
    "eval.max_len_b": Range(0, 10 ** 5), "eval.batch_sentences": POSITIVE, "eval.context_window": POSITIVE,
}


@dataclass
class DataConfig:
    corpus: str = ""
    """Prepared corpus: a folder name under the data root (`--root`, $LNREPRO_DATA or data/), e.g. wmt16_ende."""
    train_split: str = "train"
    """Split used for training."""
    valid_split: str = "valid"
    """Split used for validation loss/NLL (newstest2013 for WMT)."""
    test_splits: list[str] = field(default_factory=list)
    """Splits decoded and scored by `lnrepro evaluate`."""
    max_tokens: int = 3584
    """Tokens per GPU per batch (frames for ASR): paper Table 7."""
    max_source_positions: int = 1024
    """Training pairs with a longer side (in tokens or frames) are skipped."""
    tokens_per_sample: int = 3072
    """LM only: length of each training block of the token stream."""
    specaugment: bool = False
    """ASR only: SpecAugment on training features (fairseq's LibriSpeech policy)."""
    specaugment_time_p: float = 1.0
    """ASR only: the widest SpecAugment time mask as a fraction of the utterance's frames (fairseq's time_mask_p; its
    LibriSpeech policy has 1.0)."""


@dataclass
class ModelConfig:
    variant: str = "post_ln"
    """One of the eight variants (repro/model/variants.py)."""
    encoder_layers: int = 6
    """Encoder depth N (0 for the decoder-only LM)."""
    decoder_layers: int = 6
    """Decoder depth M."""
    d_model: int = 512
    """Hidden size d."""
    ffn_dim: int = 2048
    """FFN inner size."""
    heads: int = 8
    """Attention heads."""
    dropout: float = 0.3
    """Dropout on embeddings and sublayer outputs."""
    attention_dropout: float = 0.0
    """Dropout on attention weights."""
    activation_dropout: float = 0.0
    """Dropout after the FFN's ReLU."""
    adaptive_cutoffs: list[int] = field(default_factory=lambda: [20000, 60000])
    """LM only: adaptive input/softmax band edges."""
    adaptive_factor: float = 4.0
    """LM only: each band's embedding is this factor smaller than the previous one."""
    adaptive_softmax_dropout: float = 0.2
    """LM only: dropout on the adaptive softmax input and inside its tail bands (fairseq transformer_lm_wiki103)."""
    input_features: int = 80
    """ASR only: filterbank channels."""
    conv_channels: int = 1024
    """ASR only: channels of the subsampler's first convolution."""
    b2t_depth_scaled_init: bool = False
    """Opt-in for b2t and b2t_noln (the authors' 2023 code, not in the 2022 paper): layer weights times N^-0.5 at
    init; the b2t_2023 variant is B2T with it."""


@dataclass
class OptimConfig:
    lr: float = 1e-3
    """Peak learning rate."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    """Adam betas."""
    eps: float = 1e-8
    """Adam epsilon."""
    weight_decay: float = 0.0
    """Adam weight decay."""
    warmup_updates: int = 4000
    """Linear warmup length of the inverse-sqrt schedule (ignored by variants that train without warmup)."""
    warmup_init_lr: float = 1e-7
    """Learning rate at update 0."""
    decay_period: int = 4000
    """Variants trained without warmup (T-Fixup): lr * sqrt(P / (P + step)) with P this (T-Fixup's --decay-period)."""
    max_updates: int = 50000
    """Training stops after this many updates."""
    clip_norm: float = 0.0
    """Gradient norm clipping (0: none; the norm is still logged)."""
    label_smoothing: float = 0.1
    """Label-smoothed cross-entropy epsilon (the LM uses plain NLL through the adaptive softmax)."""
    gpus_per_update: int = 128
    """How many GPUs' batches make one update in the paper (Table 8); update_freq = this / world size."""


@dataclass
class TrainConfig:
    seed: int = 1
    """Seed for initialisation, dropout and data order."""
    precision: str = "fp32"
    """fp32, bf16 (autocast) or fp16 (autocast with loss scaling)."""
    log_interval: int = 100
    """Updates between JSONL log lines."""
    validate_interval: int = 1000
    """Updates between validation passes (also at every epoch end)."""
    save_interval: int = 1000
    """Updates between checkpoints; the last `keep_last` are kept for averaging."""
    keep_last: int = 10
    """Checkpoints kept (and averaged by evaluate)."""
    divergence_window: int = 2000
    """Updates after warmup over which a loss that stopped improving while far above its start is a failure."""
    compile: bool = False
    """Wrap the model in torch.compile."""


@dataclass
class EvalConfig:
    beam: int = 4
    """Beam size."""
    lenpen: float = 1.0
    """Length penalty: hypotheses are ranked by score / length^lenpen."""
    lenpen_by_split: dict[str, float] = field(default_factory=dict)
    """Per-split length penalties (0.6 for newstest2014 in the paper's MT setup)."""
    average_last: int = 10
    """Average the parameters of the last N checkpoints before decoding."""
    max_len_a: float = 1.2
    """Maximum output length is a * source length + b."""
    max_len_b: int = 10
    """See max_len_a."""
    batch_sentences: int = 64
    """Sentences per decoding batch."""
    context_window: int = 2560
    """LM only: each scored token sees up to this many tokens of context."""


@dataclass
class Recipe:
    task: str = "mt"
    """mt, summarization, lm or asr."""
    description: str = ""
    """One line shown by `lnrepro recipes`."""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    scales: dict[str, dict] = field(default_factory=dict)
    """Overrides for the reduced scales (mini, tiny), kept in the recipe itself."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class ResolvedRecipe:
    path: Path
    scale: str
    recipe: Recipe
    overrides: list[str]
    trained_hash: str | None = None
    """A run's own hash, where its recipe file has changed since (`recipe_of_run`): the record keeps what trained."""

    @property
    def name(self) -> str:
        """The recipe's path below recipes/ without .yaml, e.g. 18L-18L-b2t or gigaword/6L-6L-b2t."""
        parts = self.path.resolve().with_suffix("").parts
        if "recipes" in parts:
            return "/".join(parts[len(parts) - parts[::-1].index("recipes"):])
        return self.path.stem

    def hash(self) -> str:
        """Hash of the resolved settings but the seed: two runs with the same hash ran the same recipe (the seed is
        part of a record's key, not of its recipe)."""
        if self.trained_hash:
            return self.trained_hash
        d = self.recipe.to_dict()
        d["train"].pop("seed")
        for key, default in ADDED_KEYS.items():
            section, name = key.split(".")
            if d[section][name] == default:
                d[section].pop(name)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    def run_folder(self, parent: Path) -> Path:
        """This run's folder under `parent` (run_folder), with the hash of its recipe where overrides made it."""
        return run_folder(parent, self.name, self.scale, self.recipe.train.seed, self.hash() if self.overrides else "")


def run_folder(parent: Path, recipe_name: str, scale: str, seed: int, tag: str = "") -> Path:
    """A run's folder where none is named: its recipe, scale and seed, and with `--set` the hash of the overrides'
    recipe (`tag`), so that an ablation never meets the recipe's own run."""
    return Path(parent) / f"{recipe_name.replace('/', '-')}-{scale}{'-' + tag if tag else ''}-s{seed}"


# -- loading --------------------------------------------------------------------------------------------------

class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (YAML would silently keep the last)."""

    def compose_node(self, parent, index):
        # A recipe has no use for aliases, and they make a few lines expand to gigabytes ("billion laughs").
        if self.check_event(yaml.events.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a recipe",
                                              self.peek_event().start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(None, None, "a key must be a name, not a list or mapping",
                                                        key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


_YAML_CACHE: dict[tuple[str, str], dict] = {}


def _version(path: Path) -> tuple[str, str]:
    """A file's version as the caches key it: its resolved path and its content's digest (an mtime can be too
    coarse to tell two writes apart)."""
    return str(path.resolve()), hashlib.sha256(path.read_bytes()).hexdigest()


def _parsed(path: Path) -> tuple[tuple[str, str], dict]:
    """(the file's version, its mapping as parsed once per process and version: not to be changed)."""
    key = _version(path)
    if key not in _YAML_CACHE:
        _YAML_CACHE[key] = _parse_yaml(path)
    return key, _YAML_CACHE[key]


def _read_yaml(path: Path, context: str) -> dict:
    """A recipe file's mapping (callers get a copy)."""
    if not path.is_file():
        raise RecipeError(f"{context}: file not found: {path}")
    return copy.deepcopy(_parsed(path)[1])


def _parse_yaml(path: Path) -> dict:
    try:
        data = yaml.load(path.read_bytes().decode("utf-8"), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError as e:
        raise RecipeError(f"{path}: not UTF-8 text (byte {e.start}); a recipe is a YAML text file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise RecipeError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    except RecursionError:
        raise RecipeError(f"{path}: nested too deeply to be a recipe") from None
    if data is None:
        raise RecipeError(f"{path}: empty (no keys); a recipe needs at least `task:` or `base:`")
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data


def deep_merge(base: dict, delta: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in delta.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "lenpen_by_split":
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_raw(path: Path) -> dict:
    """The recipe merged over its base (one level), scales not yet applied."""
    base_data, data = _layers(Path(path))
    return deep_merge(base_data, data) if base_data is not None else data


SCALES_REPLACE = "scales_replace"  # a recipe's list of its keys that its base's scales replace on purpose


def _layers(path: Path) -> tuple[dict | None, dict]:
    """(the base's mapping or None, the recipe's own mapping without `base:` and `scales_replace:`)."""
    data = _read_yaml(path, "recipe")
    data.pop(SCALES_REPLACE, None)
    base = data.pop("base", None)
    if base is None:
        return None, data
    if not isinstance(base, str):
        raise RecipeError(f"{path}: base: {base!r} is not a file path (expected a string)")
    base_path = (path.parent / base).resolve()
    if base_path == path.resolve():
        raise RecipeError(f"{path}: base: {base!r} is a cycle (the recipe names itself)")
    base_data = _read_yaml(base_path, f"{path}: base")
    if "base" in base_data:
        nested = (base_path.parent / str(base_data["base"])).resolve()
        kind = "a cycle" if nested == path.resolve() else "nested"
        raise RecipeError(f"{base_path}: base: {base_data['base']!r} is {kind} "
                          f"(a recipe has one level of base, and a base has none)")
    if SCALES_REPLACE in base_data:
        raise RecipeError(f"{base_path}: {SCALES_REPLACE}: unknown key in a base (it belongs to a recipe)")
    return base_data, data


def _leaves(d: dict, prefix: str = "") -> dict[str, object]:
    """Key path -> value of every leaf of a recipe mapping (a per-split mapping is one value, as deep_merge has it)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "lenpen_by_split":
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_scale_replacements(path: Path) -> None:
    """Refuse a recipe whose own key its base's scale would replace with another value unannounced (see the module
    docstring); and a `scales_replace` entry that replaces nothing, which would announce what does not happen."""
    base_data, own = _layers(path)
    listed = _read_yaml(path, "recipe").get(SCALES_REPLACE, []) or []
    if not isinstance(listed, list) or not all(isinstance(k, str) for k in listed):
        raise RecipeError(f"{path}: {SCALES_REPLACE}: {listed!r} is not a list of key paths like optim.lr")
    own_scales = own.get("scales") or {}
    for where, scales in ((path, own_scales), (path.parent, (base_data or {}).get("scales") or {})):
        if not isinstance(scales, dict):  # read before the schema checks it: say so here, in its words
            raise RecipeError(f"{path if where == path else 'its base'}: scales: {scales!r} is not a mapping of "
                              f"scale names (mini, tiny) to their overrides")
    own_keys = _leaves({k: v for k, v in own.items() if k != "scales"})
    used = set()
    for scale, delta in ((base_data or {}).get("scales") or {}).items():
        if not isinstance(delta, dict):
            continue
        stated = _leaves(own_scales.get(scale) or {}) if isinstance(own_scales.get(scale), dict) else {}
        for key, value in _leaves(delta).items():
            if key not in own_keys or own_keys[key] == value or key in stated:
                continue
            if key in listed:
                used.add(key)
                continue
            raise RecipeError(
                f"{path}: {key}: {own_keys[key]!r} is replaced at scale {scale} by its base's scales.{scale}.{key} "
                f"({value!r}) unannounced: set it in the recipe's own scales.{scale} (the value it takes there), "
                f"or list it under {SCALES_REPLACE}: if the base's value is meant")
    for key in listed:
        if key not in used:
            raise RecipeError(f"{path}: {SCALES_REPLACE}: {key!r} is not a key of this recipe that a scale of its "
                              f"base replaces with another value")


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _coerce(value, tp, where: str):
    """Check (and for int->float, convert) one value against a schema type."""
    origin = typing.get_origin(tp)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 5e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is dict:
        if isinstance(value, dict):
            return value
    elif origin is list:
        (item,) = typing.get_args(tp)
        if isinstance(value, list):
            return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    elif origin is dict:
        _, item = typing.get_args(tp)
        if isinstance(value, dict):
            return {str(k): _coerce(v, item, f"{where}.{k}") for k, v in value.items()}
    raise RecipeError(f"{where}: {value!r} is {type(value).__name__}, expected {_type_name(tp)}")


def _join(where: str, key: str) -> str:
    """'recipes/a.yaml:' + 'model' -> 'recipes/a.yaml: model'; 'recipes/a.yaml: model' + 'x' -> '... model.x'."""
    return f"{where} {key}" if where.endswith(":") else f"{where}.{key}"


@functools.cache
def _fields(cls) -> tuple[dict, list[str]]:
    """A recipe section's field types and names: evaluating its string annotations is most of a resolve's time,
    and the queue resolves thousands of recipes."""
    return typing.get_type_hints(cls), [f.name for f in dataclasses.fields(cls)]


def _build(cls, data: dict, where: str):
    if not isinstance(data, dict):
        raise RecipeError(f"{where}: {data!r} is {type(data).__name__}, expected a mapping of keys")
    hints, names = _fields(cls)
    kwargs = {}
    for key, value in data.items():
        path = _join(where, key)
        if key not in names:
            raise RecipeError(f"{path}: unknown key (expected one of {', '.join(names)})")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _build(tp, value, path)
        else:
            kwargs[key] = _coerce(value, tp, path)
    return cls(**kwargs)


def _check(recipe: Recipe, where: str) -> None:
    m, d, o, t = recipe.model, recipe.data, recipe.optim, recipe.train

    def fail(key: str, value, expected: str):
        raise RecipeError(f"{_join(where, key)}: {value!r} {expected}")

    if recipe.task not in TASKS:
        fail("task", recipe.task, f"is not a task (expected one of {', '.join(TASKS)})")
    if m.variant not in VARIANTS:
        fail("model.variant", m.variant, f"is not a known variant (expected one of {', '.join(VARIANTS)})")
    if t.precision not in PRECISIONS:
        fail("train.precision", t.precision, f"is not a precision (expected one of {', '.join(PRECISIONS)})")
    for key, allowed in RANGES.items():
        section, name = key.split(".")
        value = getattr(getattr(recipe, section), name)
        if isinstance(value, float) and not math.isfinite(value):
            fail(key, value, "must be a finite number")
        if value not in allowed:
            fail(key, value, f"must lie in {allowed}")
    for key, value in (("data.corpus", d.corpus), ("data.train_split", d.train_split),
                       ("data.valid_split", d.valid_split)):
        if not value.strip():
            fail(key, value, "must name a corpus or split (empty)")
    if not d.test_splits or any(not x.strip() for x in d.test_splits):
        fail("data.test_splits", d.test_splits, "must name at least one split to evaluate")
    for key, value in (("data.corpus", d.corpus), ("data.train_split", d.train_split),
                       ("data.valid_split", d.valid_split), *(("data.test_splits", x) for x in d.test_splits)):
        if not NAME.fullmatch(value):  # a name under the data root, never a path out of it
            fail(key, value, "must be a plain name (letters, digits, '_', '-', '.'; not starting with '.')")
    if len(set(d.test_splits)) != len(d.test_splits):
        fail("data.test_splits", d.test_splits, "names a split twice")
    unknown = [x for x in recipe.eval.lenpen_by_split if x not in d.test_splits]
    if unknown:
        fail("eval.lenpen_by_split", recipe.eval.lenpen_by_split, f"names {', '.join(unknown)}, not a test split "
             f"({', '.join(d.test_splits)})")
    if recipe.task == "lm" and not m.adaptive_cutoffs:
        fail("model.adaptive_cutoffs", m.adaptive_cutoffs, "must hold at least one band edge for task lm")
    if any(not math.isfinite(v) or v < 0 for v in recipe.eval.lenpen_by_split.values()):
        fail("eval.lenpen_by_split", recipe.eval.lenpen_by_split, "must map splits to finite penalties >= 0")
    if recipe.eval.average_last > t.keep_last:
        fail("eval.average_last", recipe.eval.average_last, f"exceeds train.keep_last ({t.keep_last}): only "
             f"{t.keep_last} checkpoints are kept to average")
    if any(c < 1 for c in m.adaptive_cutoffs):
        fail("model.adaptive_cutoffs", m.adaptive_cutoffs, "must be positive")
    if m.d_model % m.heads:
        fail("model.heads", m.heads, f"must divide model.d_model ({m.d_model})")
    if recipe.task == "lm" and m.encoder_layers != 0:
        fail("model.encoder_layers", m.encoder_layers, "must be 0 for task lm (a decoder-only model)")
    if recipe.task != "lm" and m.encoder_layers < 1:
        fail("model.encoder_layers", m.encoder_layers, f"must be at least 1 for task {recipe.task}")
    if m.b2t_depth_scaled_init and (VARIANTS[m.variant].b2t == "none" or VARIANTS[m.variant].init != "default"):
        fail("model.b2t_depth_scaled_init", True, f"applies to the paper's B2T variants only, not {m.variant} "
             f"(b2t_2023 is B2T with it)")
    if len(o.betas) != 2 or not all(0.0 <= b < 1.0 for b in o.betas):
        fail("optim.betas", o.betas, "must be two numbers in [0, 1)")
    if list(m.adaptive_cutoffs) != sorted(set(m.adaptive_cutoffs)):
        fail("model.adaptive_cutoffs", m.adaptive_cutoffs, "must be strictly increasing")
    if recipe.task != "lm" and d.specaugment and recipe.task != "asr":
        fail("data.specaugment", True, "applies to task asr only")
    if not 0.0 < d.specaugment_time_p <= 1.0:
        fail("data.specaugment_time_p", d.specaugment_time_p, "must be in (0, 1]")
    for name in recipe.scales:
        if name not in SCALES[1:]:
            fail("scales", name, f"is not a reduced scale (expected {' or '.join(SCALES[1:])})")


def parse_set(item: str) -> tuple[list[str], object]:
    if "=" not in item:
        raise RecipeError(f"--set {item!r}: expected key=value, e.g. --set optim.lr=5e-4")
    key, text = item.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise RecipeError(f"--set {item!r}: {key!r} is not a key path like model.variant")
    try:
        value = yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        value = text
    return key.split("."), value


def _versions(path: Path) -> tuple | None:
    """The files a resolve of `path` reads (the recipe, then its base), each as _version keys it; None where one
    cannot be read or parsed (resolve then says why)."""
    out: list[tuple] = []
    try:
        while len(out) < 2:
            key, data = _parsed(path)
            out.append(key)
            if not isinstance(data.get("base"), str):
                break
            path = path.parent / data["base"]
    except (OSError, RecipeError):
        return None
    return tuple(out)


_RESOLVED: dict[tuple, ResolvedRecipe] = {}


def resolve(path: str | Path, scale: str = "paper", sets: list[str] | None = None) -> ResolvedRecipe:
    """A recipe at a scale with its --set overrides, checked. Kept per process for the files' versions it read:
    the queue prices thousands of runs from a few hundred recipes. Callers get a copy."""
    path = Path(path)
    versions = _versions(path)
    key = (str(path), scale, tuple(sets or ()), versions)
    if versions is not None and key in _RESOLVED:
        return copy.deepcopy(_RESOLVED[key])
    out = _resolve(path, scale, sets)
    if versions is not None:
        _RESOLVED[key] = copy.deepcopy(out)
    return out


def _resolve(path: Path, scale: str, sets: list[str] | None) -> ResolvedRecipe:
    if scale not in SCALES:
        raise RecipeError(f"--scale {scale!r}: expected one of {', '.join(SCALES)}")
    raw = load_raw(path)
    check_scale_replacements(path)
    scales = raw.get("scales", {}) or {}
    if not isinstance(scales, dict):
        raise RecipeError(f"{path}: scales: {scales!r} is {type(scales).__name__}, expected a mapping")
    # Validate the paper-scale recipe and every scale's overrides, whichever is asked for.
    _check(_build(Recipe, raw, f"{path}:"), f"{path}:")
    for name, delta in scales.items():
        if not isinstance(delta, dict):
            raise RecipeError(f"{path}: scales.{name}: {delta!r} is {type(delta).__name__}, expected a mapping")
        if "scales" in delta:
            raise RecipeError(f"{path}: scales.{name}.scales: unknown key (scales do not nest)")
        if "task" in delta and delta["task"] != raw.get("task"):
            raise RecipeError(f"{path}: scales.{name}.task: {delta['task']!r}: a scale keeps the recipe's task "
                              f"({raw.get('task')!r})")
        _check(_build(Recipe, deep_merge(raw, delta), f"{path}: scales.{name}"), f"{path}: scales.{name}")
    data = raw
    if scale != "paper":
        if scale not in scales:
            raise RecipeError(f"{path}: scales.{scale}: missing (the recipe defines {', '.join(scales) or 'none'})")
        data = deep_merge(raw, scales[scale])
    for item in sets or []:
        keys, value = parse_set(item)
        if keys[0] in ("scales", "base", SCALES_REPLACE):
            raise RecipeError(f"--set {item!r}: {keys[0]} is not a setting; set the key itself (with --scale to "
                              f"choose the scale)")
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise RecipeError(f"--set {item!r}: {k} is not a section")
        node[keys[-1]] = value
    where = f"{path}:" if not sets else f"{path} (with --set):"
    recipe = _build(Recipe, data, where)
    _check(recipe, where)
    check_task_keys(data, recipe.task, where)
    # The seed is not an override: a run of another seed is a run of the same recipe.
    overrides = [item for item in sets or [] if parse_set(item)[0] != ["train", "seed"]]
    return ResolvedRecipe(path=path, scale=scale, recipe=recipe, overrides=overrides)


# Keys the schema gained after records were made, with their defaults: a recipe at the default trains as before,
# so its hash leaves the key out and its records keep counting.
ADDED_KEYS = {"data.specaugment_time_p": 1.0}

# The keys only one task reads (their docstrings above say so too): another task's recipe refuses them, and its
# resolved recipe leaves them out.
TASK_ONLY = {"data.tokens_per_sample": "lm", "model.adaptive_cutoffs": "lm", "model.adaptive_factor": "lm",
             "model.adaptive_softmax_dropout": "lm", "eval.context_window": "lm",
             "data.specaugment": "asr", "data.specaugment_time_p": "asr", "model.input_features": "asr",
             "model.conv_channels": "asr"}
NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def check_task_keys(data: dict, task: str, where: str) -> None:
    """A key that only another task reads is refused: it would change the recipe's hash and do nothing."""
    for key, owner in TASK_ONLY.items():
        section, name = key.split(".")
        if owner != task and name in (data.get(section) or {}):
            raise RecipeError(f"{where} {key}: a key of task {owner} only, not of {task}")


def dump_yaml(recipe: Recipe) -> str:
    """The resolved recipe as YAML, without the scales and without keys that only another task reads."""
    d = recipe.to_dict()
    d.pop("scales", None)
    for key, task in TASK_ONLY.items():
        if task != recipe.task:
            section, name = key.split(".")
            d[section].pop(name, None)
    return yaml.safe_dump(d, sort_keys=False)


@functools.lru_cache(maxsize=None)  # read from the source once per process: every resolve asks
def field_docs(cls=Recipe, prefix: str = "") -> list[tuple[str, str]]:
    """(key path, docstring) for every schema field, read from the docstrings under each field."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += field_docs(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.append((prefix + f.name, docs.get(f.name, "")))
    return out


def recipe_of_run(run_dir: Path, status: dict) -> ResolvedRecipe:
    """The recipe a run trained under: its recipe file resolved as the run resolved it when that still gives the
    run's hash; else (the file changed since) the settings the run wrote to its own recipe.yaml, with the run's
    hash, so that evaluation uses them and the record names what trained, never today's file."""
    sets = [*status.get("overrides", []), f"train.seed={status.get('seed', 1)}"]
    trained = status.get("recipe_hash")
    try:
        resolved = resolve(status["recipe"], status["scale"], sets)
        if not trained or resolved.hash() == trained:
            return resolved
    except RecipeError:
        pass
    own = Path(run_dir) / "recipe.yaml"
    if not own.is_file():
        raise RecipeError(f"{run_dir}: its recipe file changed since it trained and the run keeps no recipe.yaml")
    recipe = _build(Recipe, yaml.safe_load(own.read_text(encoding="utf-8")), f"{own}:")
    return ResolvedRecipe(path=Path(status["recipe"]), scale=status["scale"], recipe=recipe,
                          overrides=list(status.get("overrides", [])), trained_hash=trained)
