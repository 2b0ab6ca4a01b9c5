"""Recipes: every shipped recipe loads; malformed ones give one line naming file, key, value; exit code 2."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from repro.cli import app
from repro.config import SCALES, RecipeError, resolve
from repro.tables.spec import all_recipe_names

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def test_every_table_cell_has_a_recipe_that_loads_at_every_scale():
    for name in all_recipe_names():
        path = REPO / "recipes" / f"{name}.yaml"
        assert path.is_file(), name
        for scale in ("paper", "mini", "tiny"):
            r = resolve(path, scale).recipe
            assert r.model.variant in name


def test_paper_scale_values_follow_tables_7_and_8():
    r = resolve(REPO / "recipes/18L-18L-b2t.yaml").recipe
    assert (r.model.encoder_layers, r.model.decoder_layers, r.model.variant) == (18, 18, "b2t")
    assert r.data.max_tokens * r.optim.gpus_per_update == 458_752
    assert (r.optim.lr, r.optim.warmup_updates, r.optim.max_updates) == (1e-3, 4000, 50000)
    assert r.eval.lenpen_by_split == {"newstest2014": 0.6} and r.eval.beam == 4
    assert resolve(REPO / "recipes/gigaword/18L-18L-b2t.yaml").recipe.optim.gpus_per_update == 144
    assert resolve(REPO / "recipes/wikitext103/16L-pre_ln.yaml").recipe.optim.gpus_per_update == 192
    lm = resolve(REPO / "recipes/wikitext103/6L-b2t.yaml").recipe
    assert (lm.model.d_model, lm.model.ffn_dim, lm.data.max_tokens, lm.optim.warmup_updates) == (1024, 4096, 1024, 2000)


def test_authors_code_settings_in_recipes():
    """Clip-norm 0.1 beyond 18L-18L (authors' README), T-Fixup's own hyper-parameters, ASR dropouts (s2t_transformer_m)."""
    for path in sorted((REPO / "recipes").rglob("*.yaml")):
        if "base" in path.parts or "calibration" in path.parts:
            continue
        r = resolve(path).recipe
        deep = r.model.encoder_layers + r.model.decoder_layers > 36 and r.task == "mt"
        assert r.optim.clip_norm == (0.1 if deep else 0.0), path
        if r.model.variant == "t_fixup":
            assert (r.optim.lr, r.optim.weight_decay, r.optim.decay_period) == (5e-4, 1e-4, 4000), path
        else:
            assert (r.optim.lr, r.optim.weight_decay) == (1e-3, 0.0), path
        if r.task == "asr":
            assert r.model.attention_dropout == r.model.activation_dropout == r.model.dropout == 0.15
        if r.task == "lm":
            assert r.model.adaptive_softmax_dropout == 0.2


def test_no_warmup_schedule_uses_decay_period_not_warmup():
    from repro.train.optim import inverse_sqrt_lr
    assert inverse_sqrt_lr(0, 5e-4, 400, 1e-7, warmup=False, decay_period=4000) == 5e-4
    assert inverse_sqrt_lr(4000, 5e-4, 400, 1e-7, warmup=False, decay_period=4000) == pytest.approx(5e-4 / 2 ** 0.5)


def test_label_smoothed_loss_ignores_pad_positions_exactly():
    """fairseq's label smoothing on the non-pad targets: computed here by selecting them (the obvious reference),
    the shipped loss zeroes pads instead; values and gradients agree, and a pad target's row gets no gradient."""
    from repro.train.optim import label_smoothed_nll
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g, requires_grad=True)
    target = torch.randint(2, 11, (3, 5), generator=g)
    target[0, 3:] = 1
    target[2, 1:] = 1
    eps, pad = 0.1, 1
    loss, nll = label_smoothed_nll(logits, target, eps, pad)
    (grad,) = torch.autograd.grad(loss, logits)
    ref_logits = logits.detach().clone().requires_grad_(True)
    lp = torch.log_softmax(ref_logits, -1).view(-1, 11)
    keep = target.reshape(-1) != pad
    lp_k, t_k = lp[keep], target.reshape(-1)[keep]
    ref_nll = -lp_k[torch.arange(len(t_k)), t_k]
    ref_loss = ((1 - eps - eps / 10) * ref_nll - eps / 10 * lp_k.sum(-1)).sum()
    (ref_grad,) = torch.autograd.grad(ref_loss, ref_logits)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.sum().item(), rel=1e-6)
    assert torch.equal(grad, ref_grad)
    assert grad[0, 3:].abs().max() == 0 and grad[2, 1:].abs().max() == 0


def test_newstest2014_is_the_full_set():
    from repro.data.wmt import sacrebleu_test_set
    assert sacrebleu_test_set(2014) == "wmt14/full"
    assert [sacrebleu_test_set(y) for y in (2010, 2016)] == ["wmt10", "wmt16"]


def test_scale_and_set_overrides():
    res = resolve(REPO / "recipes/6L-6L-b2t.yaml", "mini", ["optim.lr=5e-4", "model.variant=pre_ln"])
    assert res.recipe.data.corpus == "multi30k" and res.recipe.optim.lr == 5e-4
    assert res.recipe.model.variant == "pre_ln" and res.recipe.model.d_model == 128
    assert res.name == "6L-6L-b2t"
    assert resolve(REPO / "recipes/gigaword/6L-6L-b2t.yaml").name == "gigaword/6L-6L-b2t"


def write(tmp_path: Path, text: str, name="r.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


BASE = "task: mt\ndata: {corpus: c, test_splits: [t]}\n"  # a valid minimal recipe; each case adds one section
M = BASE + "model: {variant: b2t, %s}\n"
O = BASE + "optim: {%s}\n"
T = BASE + "train: {%s}\n"
E = BASE + "eval: {%s}\n"
BAD = [
    ("typo key", O % "lrr: 0.1", [], "optim.lrr", "unknown key"),
    ("top-level typo", BASE + "trian: {seed: 1}\n", [], "trian", "unknown key"),
    ("wrong type int", M % "d_model: big", [], "model.d_model", "expected int"),
    ("wrong type float", O % "lr: fast", [], "optim.lr", "expected float"),
    ("bool as int", M % "heads: true", [], "model.heads", "expected int"),
    ("list expected", O % "betas: 0.9", [], "optim.betas", "expected list"),
    ("unknown variant", BASE + "model: {variant: b2tt}\n", [], "model.variant", "not a known variant"),
    ("unknown task", "task: vision\n", [], "task", "not a task"),
    ("heads do not divide", M % "d_model: 30, heads: 8", [], "model.heads", "must divide"),
    ("lm with encoder", "task: lm\ndata: {corpus: c, test_splits: [t]}\nmodel: {encoder_layers: 6}\n", [],
     "model.encoder_layers", "must be 0"),
    ("b2t init on pre_ln", BASE + "model: {variant: pre_ln, b2t_depth_scaled_init: true}\n", [],
     "model.b2t_depth_scaled_init", "B2T variants only"),
    ("bad precision", T % "precision: fp8", [], "train.precision", "not a precision"),
    ("dropout out of range", M % "dropout: 1.5", [], "model.dropout", "[0, 1)"),
    ("section not mapping", "task: mt\ndata: 3\n", [], "data", "mapping"),
    ("bad scale name", BASE + "scales: {huge: {}}\n", [], "scales", "not a reduced scale"),
    ("bad key inside scale", BASE + "scales: {mini: {model: {dmodel: 3}}}\n", [], "scales.mini.model.dmodel",
     "unknown key"),
    ("bad --set value", BASE, ["model.heads=many"], "model.heads", "expected int"),
    ("bad --set form", BASE, ["model.heads"], "--set", "key=value"),
    ("bad --set key", BASE, ["model.nope=1"], "model.nope", "unknown key"),
    ("invalid yaml", "task: [mt\n", [], "r.yaml", "not valid YAML"),
    ("top level list", "- 1\n- 2\n", [], "r.yaml", "top level must be a mapping"),
    # values outside their valid range (repro/config.py RANGES) and files that are not recipes
    ("empty file", "", [], "r.yaml", "empty"),
    ("comment-only file", "# nothing\n", [], "r.yaml", "empty"),
    ("duplicate key", BASE + "optim: {lr: 0.1}\noptim: {lr: 0.2}\n", [], "r.yaml", "given twice"),
    ("lr .nan", O % "lr: .nan", [], "optim.lr", "finite"),
    ("lr .inf", O % "lr: .inf", [], "optim.lr", "finite"),
    ("lr 'nan' string", O % "lr: 'nan'", [], "optim.lr", "finite"),
    ("lr above 1", O % "lr: 100", [], "optim.lr", "(0, 1]"),
    ("negative eps", O % "eps: -1.0e-8", [], "optim.eps", "(0, 1)"),
    ("negative warmup", O % "warmup_updates: -5", [], "optim.warmup_updates", "[1, inf)"),
    ("save_interval 0", T % "save_interval: 0", [], "train.save_interval", "[1, inf)"),
    ("log_interval 0", T % "log_interval: 0", [], "train.log_interval", "[1, inf)"),
    ("validate_interval 0", T % "validate_interval: 0", [], "train.validate_interval", "[1, inf)"),
    ("keep_last -1", T % "keep_last: -1", [], "train.keep_last", "[1, inf)"),
    ("negative seed", T % "seed: -3", [], "train.seed", "[0, "),
    ("max_source_positions 0", BASE.replace("test_splits: [t]", "test_splits: [t], max_source_positions: 0"), [],
     "data.max_source_positions", "[1, 1000000000]"),
    ("empty corpus name", "task: mt\ndata: {corpus: '', test_splits: [t]}\n", [], "data.corpus", "empty"),
    ("empty test_splits", "task: mt\ndata: {corpus: c, test_splits: []}\n", [], "data.test_splits", "at least one"),
    ("average_last 0", E % "average_last: 0", [], "eval.average_last", "[1, inf)"),
    ("average_last > keep_last", E % "average_last: 20", [], "eval.average_last", "keep_last"),
    ("negative max_len_b", E % "max_len_b: -1", [], "eval.max_len_b", "[0, 100000]"),
    ("--set lr nan", BASE, ["optim.lr=nan"], "optim.lr", "finite"),
    ("--set negative beam", BASE, ["eval.beam=-2"], "eval.beam", "[1, inf)"),
    # the hostile trial's recipes: keys of another task, a scale switching task, no upper bound, paths out of the
    # data root, unknown or repeated splits, empty LM cutoffs, --set on scales, YAML keys that are not names
    ("LM key in an MT recipe", BASE + "model: {adaptive_cutoffs: [5, 9]}\n", [], "model.adaptive_cutoffs",
     "task lm only"),
    ("scale switching the task", BASE + "scales: {mini: {task: lm}}\n", [], "scales.mini.task", "keeps"),
    ("d_model 1e23", BASE + "model: {d_model: 100000000000000000000000}\n", [], "model.d_model", "[1, 65536]"),
    ("encoder_layers 1e9", BASE + "model: {encoder_layers: 1000000000}\n", [], "model.encoder_layers",
     "[0, 1000]"),
    ("corpus out of the root", "task: mt\ndata: {corpus: ../../../etc, test_splits: [t]}\n", [], "data.corpus",
     "plain name"),
    ("split out of the root", "task: mt\ndata: {corpus: c, test_splits: [../x]}\n", [], "data.test_splits",
     "plain name"),
    ("test split twice", "task: mt\ndata: {corpus: c, test_splits: [t, t]}\n", [], "data.test_splits", "twice"),
    ("lenpen of an unknown split", BASE + "eval: {lenpen_by_split: {nosuch: 0.6}}\n", [], "eval.lenpen_by_split",
     "not a test split"),
    ("LM without cutoffs", "task: lm\ndata: {corpus: c, test_splits: [t]}\nmodel: {encoder_layers: 0, "
     "adaptive_cutoffs: []}\n", [], "model.adaptive_cutoffs", "at least one"),
    ("--set on scales", BASE, ["scales.tiny.model.d_model=0"], "--set", "not a setting"),
    ("a list as a key", BASE + "? [a, b]\n: 1\n", [], "r.yaml", "must be a name"),
    ("billion laughs", "a: &a [x, x]\nb: [*a, *a]\n", [], "r.yaml", "aliases"),
    ("nested thousands deep", "a: " + "[" * 5000 + "]" * 5000 + "\n", [], "r.yaml", "too deeply"),
]


@pytest.mark.parametrize("label,text,sets,key,expected", BAD, ids=[b[0] for b in BAD])
def test_malformed_recipe_one_line_error(tmp_path, label, text, sets, key, expected):
    path = write(tmp_path, text)
    with pytest.raises(RecipeError) as e:
        resolve(path, "paper", sets)
    msg = str(e.value)
    assert "\n" not in msg and key in msg and expected in msg
    # Through the CLI: the same line, exit code 2, no traceback
    args = ["train", str(path), "--print-config"] + [a for s in sets for a in ("--set", s)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "error:" in result.output


def test_binary_and_latin1_recipes_one_line_error(tmp_path):
    for name, data in (("bin.yaml", bytes(range(256))), ("latin1.yaml", "task: mt  # café\n".encode("latin-1"))):
        path = tmp_path / name
        path.write_bytes(data)
        result = runner.invoke(app, ["train", str(path), "--print-config"])
        assert result.exit_code == 2 and "not UTF-8 text" in result.output and name in result.output
        assert "Traceback" not in result.output


def test_missing_scale_and_missing_file(tmp_path):
    path = write(tmp_path, BASE)
    with pytest.raises(RecipeError, match="scales.mini: missing"):
        resolve(path, "mini")
    with pytest.raises(RecipeError, match="file not found"):
        resolve(tmp_path / "nope.yaml")
    result = runner.invoke(app, ["train", str(tmp_path / "nope.yaml"), "--print-config"])
    assert result.exit_code == 2


def test_base_cycle_nesting_and_missing(tmp_path):
    write(tmp_path, "base: b.yaml\ntask: mt\n", "a.yaml")
    write(tmp_path, "base: a.yaml\ntask: mt\n", "b.yaml")
    with pytest.raises(RecipeError, match="cycle"):
        resolve(tmp_path / "a.yaml")
    write(tmp_path, "base: c.yaml\n", "self.yaml")
    write(tmp_path, "base: self.yaml\n", "c.yaml")
    with pytest.raises(RecipeError, match="cycle"):
        resolve(tmp_path / "self.yaml")
    write(tmp_path, "base: self2.yaml\n", "self2.yaml")
    with pytest.raises(RecipeError, match="names itself"):
        resolve(tmp_path / "self2.yaml")
    write(tmp_path, "base: missing.yaml\n", "m.yaml")
    with pytest.raises(RecipeError, match="file not found"):
        resolve(tmp_path / "m.yaml")
    write(tmp_path, "base: x.yaml\n", "top.yaml")
    write(tmp_path, "base: y.yaml\n", "x.yaml")
    write(tmp_path, "task: mt\n", "y.yaml")
    with pytest.raises(RecipeError, match="nested"):
        resolve(tmp_path / "top.yaml")


def test_schema_fields_are_documented():
    from repro.config import field_docs
    docs = field_docs()
    assert len(docs) > 40 and all(doc for _, doc in docs), [k for k, d in docs if not d]
    # the keys of one task are data (TASK_ONLY), and their docstrings say which task reads them
    from repro.config import TASK_ONLY
    marks = {"lm": "LM only:", "asr": "ASR only:"}
    said = {key: task for key, doc in docs for task, mark in marks.items() if doc.startswith(mark)}
    assert said == TASK_ONLY


def test_cli_help_version_recipes():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for cmd in ("prepare", "train", "evaluate", "table", "figure", "recipes", "claims"):
        assert cmd in result.output
        sub = runner.invoke(app, [cmd, "--help"])
        assert sub.exit_code == 0 and "Example" in sub.output
    assert runner.invoke(app, ["--version"]).output.startswith("lnrepro ")
    result = runner.invoke(app, ["recipes", str(REPO / "recipes"), "--check"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["train", str(REPO / "recipes/18L-18L-b2t.yaml"), "--print-config", "--scale", "mini"])
    assert result.exit_code == 0 and "variant: b2t" in result.output and "encoder_layers: 18" in result.output


def test_unbuilt_and_unknown_prepare_exit_2():
    assert runner.invoke(app, ["prepare", "imagenet"]).exit_code == 2
    assert runner.invoke(app, ["prepare", "multi30k"]).exit_code == 2  # needs --source


def test_every_corpus_a_recipe_names_has_a_prepare_command_that_exists():
    from repro.data.prepare import DATASETS
    from repro.config import SCALES
    from repro.data.corpora import PREPARE_COMMANDS
    corpora = set()
    for path in sorted((REPO / "recipes").rglob("*.yaml")):
        if "base" in path.parts or "calibration" in path.parts:
            continue
        for scale in SCALES:
            corpora.add(resolve(path, scale).recipe.data.corpus)
    assert corpora <= set(PREPARE_COMMANDS)
    for command in PREPARE_COMMANDS.values():
        assert command.split()[2] in DATASETS, command


def test_help_print_config_and_warmup_warning_say_the_right_thing(tmp_path):
    help_text = runner.invoke(app, ["train", "--help"]).output
    assert "<bool>" not in help_text and "DESIGN" not in help_text and "--overwrite" in help_text
    mt = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--print-config"]).output
    assert "adaptive_cutoffs" not in mt and "specaugment" not in mt and "label_smoothing" in mt
    lm = runner.invoke(app, ["train", str(REPO / "recipes/wikitext103/6L-b2t.yaml"), "--print-config"]).output
    assert "adaptive_cutoffs" in lm and "conv_channels" not in lm
    tiny = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--print-config", "--scale", "tiny"])
    assert tiny.output.splitlines()[1].startswith("# scale tiny: generated data") and "stuck-loss" in tiny.output
    assert "# scale" not in mt  # paper scale's description is its own
    r = runner.invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--set",
                            "optim.max_updates=2", "--root", str(tmp_path / "data"), "--run-dir", str(tmp_path / "run"),
                            "--results", str(tmp_path / "results")])
    assert r.exit_code == 0 and "never leaves warmup" in r.output.replace("\n", " "), r.output


def test_optimizer_state_from_another_implementation_keeps_this_adam():
    """A checkpoint of torch's default Adam (earlier CPU runs: fused=None) resumes with this optimizer's fused
    kernel, with the moments and step counts of the checkpoint."""
    torch = pytest.importorskip("torch")
    from repro.train.optim import load_optimizer_state, make_optimizer
    w = torch.nn.Parameter(torch.ones(4))
    earlier = torch.optim.Adam([w], lr=1e-3)
    w.grad = torch.full((4,), 0.5)
    earlier.step()
    saved = earlier.state_dict()
    assert saved["param_groups"][0]["fused"] is None
    v = torch.nn.Parameter(w.detach().clone())
    resumed = make_optimizer([v], 1e-3, (0.9, 0.98), 1e-8, 0.0)
    load_optimizer_state(resumed, saved)
    assert resumed.param_groups[0]["fused"] is True
    assert torch.equal(resumed.state[v]["exp_avg"], earlier.state[w]["exp_avg"])
    assert float(resumed.state[v]["step"]) == 1.0
    v.grad = torch.full((4,), 0.5)
    resumed.step()  # the fused kernel takes the loaded state
    assert float(resumed.state[v]["step"]) == 2.0


BASE_WITH_SCALE = """task: mt
data: {corpus: c, test_splits: [t]}
optim: {lr: 0.001, gpus_per_update: 128}
scales:
  mini: {optim: {lr: 0.002, gpus_per_update: 1}}
"""


def test_a_base_scale_never_replaces_a_recipe_key_unannounced(tmp_path):
    write(tmp_path, BASE_WITH_SCALE, "base.yaml")
    write(tmp_path, "base: base.yaml\noptim: {lr: 0.0005}\n", "own.yaml")
    with pytest.raises(RecipeError, match=r"own.yaml: optim.lr: 0.0005 is replaced at scale mini by its base's "
                                          r"scales.mini.optim.lr \(0.002\) unannounced"):
        resolve(tmp_path / "own.yaml", "paper")
    r = runner.invoke(app, ["recipes", str(tmp_path), "--check"])
    assert r.exit_code == 2 and "own.yaml: optim.lr" in r.output
    # stated in the recipe's own scale: it holds there
    write(tmp_path, "base: base.yaml\noptim: {lr: 0.0005}\nscales: {mini: {optim: {lr: 0.0005}}}\n", "own.yaml")
    assert resolve(tmp_path / "own.yaml", "mini").recipe.optim.lr == 0.0005
    # listed as replaced on purpose: the base's scale wins
    write(tmp_path, "base: base.yaml\noptim: {gpus_per_update: 64}\nscales_replace: [optim.gpus_per_update]\n",
          "gpus.yaml")
    assert resolve(tmp_path / "gpus.yaml", "mini").recipe.optim.gpus_per_update == 1
    assert resolve(tmp_path / "gpus.yaml", "paper").recipe.optim.gpus_per_update == 64
    # an announcement of what does not happen is refused too; a value equal to the base's scale needs none
    write(tmp_path, "base: base.yaml\nscales_replace: [optim.lr]\n", "idle.yaml")
    with pytest.raises(RecipeError, match=r"idle.yaml: scales_replace: 'optim.lr' is not a key of this recipe"):
        resolve(tmp_path / "idle.yaml")
    write(tmp_path, "base: base.yaml\noptim: {lr: 0.002}\n", "same.yaml")
    assert resolve(tmp_path / "same.yaml", "mini").recipe.optim.lr == 0.002


def test_t_fixup_keeps_its_own_hyper_parameters_at_every_scale():
    for path in sorted((REPO / "recipes").rglob("*t_fixup.yaml")):
        for scale in SCALES:
            o = resolve(path, scale).recipe.optim
            assert (o.lr, o.weight_decay, o.decay_period) == (0.0005, 0.0001, 4000), (path, scale)
    r = runner.invoke(app, ["train", "recipes/18L-18L-t_fixup.yaml", "--scale", "mini", "--print-config"])
    assert r.exit_code == 0 and "lr: 0.0005" in r.output


def test_lm_cutoffs_above_the_vocabulary_are_refused_in_one_line():
    from repro.model.build import build_model
    r = resolve(REPO / "recipes/wikitext103/6L-b2t.yaml", "tiny").recipe
    with pytest.raises(ValueError, match=r"adaptive_cutoffs \[8, 20\]: every band edge must lie below .* 15 words"):
        build_model(r, 15, 1)


def test_a_key_added_to_the_schema_leaves_the_hash_alone_at_its_default():
    """A recipe at an added key's default trained as before the key existed: its hash leaves the key out, so its
    records keep counting; any other value is another recipe."""
    import dataclasses
    import hashlib
    import json

    from repro.config import ADDED_KEYS
    path = REPO / "recipes/librispeech/6L-6L-post_ln.yaml"
    r = resolve(path, "paper")
    d = r.recipe.to_dict()
    d["train"].pop("seed")
    for key in ADDED_KEYS:
        section, name = key.split(".")
        d[section].pop(name)
    assert r.hash() == hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]
    other = resolve(path, "paper", sets=["data.specaugment_time_p=0.5"])
    assert other.hash() != r.hash() and dataclasses.asdict(other.recipe)["data"]["specaugment_time_p"] == 0.5
    assert resolve(path, "mini").recipe.data.specaugment_time_p == 0.08
    for bad in ("0", "1.5"):
        with pytest.raises(RecipeError, match="data.specaugment_time_p"):
            resolve(path, "paper", sets=[f"data.specaugment_time_p={bad}"])
    with pytest.raises(RecipeError, match="data.specaugment_time_p"):  # a key of task asr only
        resolve(REPO / "recipes/6L-6L-post_ln.yaml", "paper", sets=["data.specaugment_time_p=0.5"])


def test_a_recipe_resolved_again_reads_its_files_as_they_are_now(tmp_path):
    """resolve keeps what it built per version of the recipe's files, so the queue prices thousands of runs from a
    few hundred recipes: a recipe or base rewritten at once (same size, possibly the same mtime) is read anew, and
    a caller changing what it was given changes nothing the next call gets."""
    write(tmp_path, BASE_WITH_SCALE, "base.yaml")
    own = write(tmp_path, "base: base.yaml\noptim: {warmup_updates: 4000}\n", "own.yaml")
    first = resolve(own, "mini")
    assert (first.recipe.optim.warmup_updates, first.recipe.optim.lr) == (4000, 0.002)
    first.recipe.optim.warmup_updates = 1
    assert resolve(own, "mini").recipe.optim.warmup_updates == 4000
    write(tmp_path, "base: base.yaml\noptim: {warmup_updates: 2000}\n", "own.yaml")
    assert resolve(own, "mini").recipe.optim.warmup_updates == 2000
    write(tmp_path, BASE_WITH_SCALE.replace("0.002", "0.003"), "base.yaml")
    assert resolve(own, "mini").recipe.optim.lr == 0.003
    assert resolve(own, "mini", ["optim.lr=0.004"]).recipe.optim.lr == 0.004
    assert resolve(own, "mini").recipe.optim.lr == 0.003
    (tmp_path / "base.yaml").unlink()
    with pytest.raises(RecipeError, match="base: file not found"):
        resolve(own, "mini")
