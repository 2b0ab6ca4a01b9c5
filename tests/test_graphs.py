"""Updates replayed as CUDA graphs (repro/train/graphs.py): on the CPU its update runs eagerly through the code a
capture records, so the tests check that code against the training loop's update; the capture itself needs a GPU
(benchmarks/cuda_graph_updates.py checks it there)."""

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from repro.cli import app
from repro.config import resolve
from repro.data.batching import ParallelData, token_batches
from repro.data.text import PAD, read_meta
from repro.model.build import build_model
from repro.reproduce import PlannedRun, job_steps
from repro.train.graphs import GraphedUpdate, check_graphable
from repro.train.optim import make_optimizer
from repro.train.tasks import batch_loss

REPO = Path(__file__).resolve().parents[1]


def tiny(tiny_root, clip: float):
    r = resolve(REPO / "recipes/6L-6L-b2t.yaml", "tiny", [f"optim.clip_norm={clip}"]).recipe
    corpus = tiny_root / r.data.corpus
    data = ParallelData(corpus, "train")
    torch.manual_seed(0)
    model = build_model(r, read_meta(corpus)["vocab_size"], PAD)
    batches = [data.collate(i) for i in token_batches(data.sizes, r.data.max_tokens, seed=1, epoch=1)[:4]]
    return r, model, batches


def loop_update(model, r, group) -> list[float]:
    """The training loop's update (repro/train/loop.py, one process), written out: its batches' gradients
    accumulated, divided by their target tokens, clipped."""
    model.zero_grad(set_to_none=True)
    sums = torch.zeros(3, dtype=torch.float64)
    for batch in group:
        loss, nll, ntok = batch_loss(model, batch, r)
        loss.backward()
        sums[0] += loss.detach().double()
        sums[1] += nll.detach().double()
        sums[2] += ntok
    scale = (1 / sums[2].clamp(min=1.0)).float()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(scale)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), r.optim.clip_norm or math.inf)
    return [*sums.tolist(), norm.item()]


@pytest.mark.parametrize("clip, per_update", [(0.0, 1), (0.05, 1), (0.0, 2)])
def test_the_graphed_update_is_the_loops_update(tiny_root, clip, per_update):
    r, model, batches = tiny(tiny_root, clip)
    twin = copy.deepcopy(model)
    model.register_parameter("unused", nn.Parameter(torch.ones(3)))  # no gradient: Adam must skip it
    graphed = GraphedUpdate(model, r, capture=False)
    opt, twin_opt = (make_optimizer(m.parameters(), 1e-3, (0.9, 0.98), 1e-8, 0.0) for m in (model, twin))
    batches = batches + batches[:per_update]  # a shape comes a second time
    for u in range(len(batches) // per_update):
        group = batches[u * per_update:(u + 1) * per_update]
        torch.manual_seed(7)  # the same dropout masks in both
        got = graphed(iter(group)).tolist()
        torch.manual_seed(7)
        want = loop_update(twin, r, group)
        assert got[2] == want[2] == sum(b["ntokens"] for b in group)
        assert got == pytest.approx(want, rel=1e-5)
        if clip:
            assert want[3] > clip  # the gradients were clipped
        for name, q in twin.named_parameters():
            torch.testing.assert_close(model.get_parameter(name).grad, q.grad, rtol=1e-5, atol=1e-8, msg=name)
        assert model.unused.grad is None
        opt.step()
        twin_opt.step()
    # each update started from zeroed gradients and sums: after the Adam steps the two models still agree
    for name, q in twin.named_parameters():
        torch.testing.assert_close(model.get_parameter(name), q, rtol=1e-4, atol=1e-6, msg=name)
    assert torch.equal(model.unused, torch.ones(3))
    assert graphed.counts() == {"graphs": 0, "replayed": 0, "eager": len(batches)}


@pytest.mark.parametrize("sets, device, world, message", [
    ([], "cpu", 1, "needs a CUDA device"),
    ([], "cuda", 2, "this run has 2"),
    (["train.precision=fp16"], "cuda", 1, "not fp16"),
    (["train.compile=true"], "cuda", 1, "choose one"),
])
def test_runs_that_cannot_be_graphed_say_why(sets, device, world, message):
    r = resolve(REPO / "recipes/18L-18L-b2t.yaml", "mini", sets).recipe
    with pytest.raises(ValueError, match=message):
        check_graphable(r, device, world)
    for fine in ([], ["train.precision=bf16"], ["optim.gpus_per_update=4"]):  # accumulation and bf16 can
        check_graphable(resolve(REPO / "recipes/18L-18L-b2t.yaml", "mini", fine).recipe, "cuda", 1)
    lm = resolve(REPO / "recipes/wikitext103/6L-b2t.yaml", "mini").recipe
    with pytest.raises(ValueError, match="not lm"):
        check_graphable(lm, "cuda", 1)


def test_cuda_graphs_on_a_cpu_is_refused_before_the_run_directory_is_made(tiny_root, tmp_path):
    r = CliRunner().invoke(app, ["train", str(REPO / "recipes/6L-6L-b2t.yaml"), "--scale", "tiny", "--cuda-graphs",
                                 "--root", str(tiny_root), "--results", str(tmp_path / "results"),
                                 "--run-dir", str(tmp_path / "run")])
    assert r.exit_code == 2 and "--cuda-graphs needs a CUDA device" in r.output, r.output
    assert not (tmp_path / "run").exists()


def test_reproduce_passes_cuda_graphs_to_the_train_step_alone(tmp_path):
    run = PlannedRun("18L-18L-b2t", "mini", 1, tmp_path / "runs")
    train, evaluate = job_steps(run, tmp_path / "results", tmp_path / "data", ("--cuda-graphs",))
    assert train[0] == "train" and train[-1] == "--cuda-graphs"
    assert evaluate[0] == "evaluate" and "--cuda-graphs" not in evaluate
    assert "--cuda-graphs" not in job_steps(run, tmp_path / "results", tmp_path / "data")[0]


def test_a_record_keeps_the_graph_counts_of_its_stretches():
    from repro.results import status_provenance
    eager = {"from_update": 0, "to_update": 100, "cpu_s": 50.0}
    graphed = {"from_update": 100, "to_update": 8000, "cpu_s": 600.0,
               "cuda_graphs": {"graphs": 38, "replayed": 7840, "eager": 60}}
    assert "cuda_graphs" not in status_provenance({"segments": [eager]})
    assert status_provenance({"segments": [{**graphed, "from_update": 0}]})["cuda_graphs"]["replayed"] == 7840
    both = status_provenance({"segments": [eager, graphed, {**graphed, "from_update": 8000}]})
    assert both["cuda_graphs"] == {"graphs": 76, "replayed": 15680, "eager": 120}


@pytest.mark.parametrize("sets", [[], ["optim.gpus_per_update=2", "train.precision=bf16"]])
def test_the_loop_trains_the_same_run_through_the_graphed_update(tiny_root, tmp_path, monkeypatch, sets):
    """The training loop with --cuda-graphs, its device check lifted so that the batches run eagerly on the CPU:
    the same logged losses, gradient norms and validation NLLs as the plain loop (one batch per update in fp32, or
    two in bf16), and the record counts the batches."""
    from repro.train import loop
    resolved = resolve(REPO / "recipes/6L-6L-b2t.yaml", "tiny", ["optim.max_updates=6", "optim.clip_norm=0.1", *sets])
    plain = loop.train_run(resolved, tmp_path / "plain", tiny_root)
    monkeypatch.setattr(loop, "check_graphable", lambda *args: None)
    graphed = loop.train_run(resolved, tmp_path / "graphed", tiny_root, cuda_graphs=True)
    assert plain["status"] == graphed["status"] == "completed"
    rows = lambda run: [{k: v for k, v in json.loads(line).items() if k not in ("time", "tokens_per_s")}
                        for line in (tmp_path / run / "log.jsonl").read_text().splitlines()]
    assert len(rows("plain")) == len(rows("graphed")) == 9
    for a, b in zip(rows("plain"), rows("graphed")):
        assert a.keys() == b.keys() and a == pytest.approx(b, rel=1e-5)
    batches = 6 * resolved.recipe.optim.gpus_per_update
    assert graphed["segments"][-1]["cuda_graphs"] == {"graphs": 0, "replayed": 0, "eager": batches}
    assert "cuda_graphs" not in plain["segments"][-1]


def test_plan_reads_the_pace_of_graphed_or_eager_stretches_as_asked(tmp_path, monkeypatch):
    """On a GPU, graphs set the pace as much as the machine: --plan with --cuda-graphs reads graphed stretches only,
    without it eager ones only, for stretches and whole runs alike."""
    from repro.reproduce import plan
    from repro.results import write_record
    from test_tables import record
    gpu = {"device": "NVIDIA H200", "cpu": "Intel(R) Xeon(R) Processor (AVX512)", "cpu_count": 16, "gpus": 1,
           "threads": 1}
    monkeypatch.setattr("repro.provenance.hardware", lambda: gpu)
    counts = {"graphs": 38, "replayed": 7900, "eager": 100}
    write_record(tmp_path, {**record("18L-18L-b2t", 1, metrics={"bleu_average": 30.0}), "duration_s": 800.0,
                            "updates": 8000, "hardware": gpu})  # eager, 10 updates/s
    write_record(tmp_path, {**record("18L-18L-b2t", 2, metrics={"bleu_average": 30.0}), "duration_s": 200.0,
                            "updates": 8000, "hardware": gpu, "cuda_graphs": counts})  # graphed, 40 updates/s
    updates = resolve(REPO / "recipes/18L-18L-b2t.yaml", "mini").recipe.optim.max_updates
    cell = ["18L-18L:b2t"]
    eager = plan(1, "mini", 3, cell, tmp_path, tmp_path / "runs", threads=1)[2]
    graphed = plan(1, "mini", 3, cell, tmp_path, tmp_path / "runs", threads=1, cuda_graphs=True)[2]
    assert eager.estimate_s == pytest.approx(0.1 * updates) and graphed.estimate_s == pytest.approx(0.025 * updates)
    # whole runs too, where no stretch matches the threads
    eager = plan(1, "mini", 3, cell, tmp_path, tmp_path / "runs", threads=4)[2]
    graphed = plan(1, "mini", 3, cell, tmp_path, tmp_path / "runs", threads=4, cuda_graphs=True)[2]
    assert (eager.estimate_s, graphed.estimate_s) == (800.0, 200.0)


def test_reproduce_refuses_cuda_graphs_before_any_job_starts(tiny_root, tmp_path):
    common = ["--scale", "tiny", "--root", str(tiny_root), "--results", str(tmp_path / "results"),
              "--runs", str(tmp_path / "runs"), "--cuda-graphs"]
    r = CliRunner().invoke(app, ["reproduce", "1", "--cells", "6L-6L:b2t", *common])
    assert r.exit_code == 2 and "6L-6L-b2t-tiny-s1: --cuda-graphs needs a CUDA device" in r.output, r.output
    r = CliRunner().invoke(app, ["reproduce", "3", "--launcher", "slurm", *common])  # a GPU there, but an LM
    assert r.exit_code == 2 and "--cuda-graphs supports tasks mt, summarization, not lm" in r.output, r.output
    assert not list((tmp_path / "runs").glob("*/*"))
