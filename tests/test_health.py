"""The training-failure rule (repro/train/health.py) at each of its edges, and on a real tiny run."""

import json
from pathlib import Path

from repro.config import resolve
from repro.train import loop
from repro.train.health import HealthMonitor, effective_window, judge_log
from repro.train.loop import train_run

REPO = Path(__file__).resolve().parents[1]


def feed(monitor, rows):
    for step, loss in rows:
        reason = monitor.check(step, loss)
        if reason:
            return step, reason
    return None


def test_window_is_capped_at_a_quarter_of_the_run():
    assert effective_window(2000, 50000, 100) == 2000
    assert effective_window(2000, 1200, 25) == 300
    assert effective_window(2000, 4000, 25) == 1000
    assert effective_window(100, 4, 1) == 10  # at least ten logged losses: a 4-update run cannot look stuck


def test_non_finite_and_exploded_losses_fail_at_once():
    assert "nan" in feed(HealthMonitor(100, 50), [(1, 9.0), (2, float("nan"))])[1]
    assert feed(HealthMonitor(100, 50), [(1, 9.0), (2, 18.0)]) is None            # exactly 2x: not yet
    step, reason = feed(HealthMonitor(100, 50), [(1, 9.0), (2, 18.01)])
    assert step == 2 and "exploded" in reason                                      # even during warmup


def test_stuck_loss_fails_only_after_warmup_plus_window_and_above_the_fraction():
    stuck = [(s, 8.0) for s in range(10, 401, 10)]
    m = HealthMonitor(warmup_updates=100, window=100)
    step, reason = feed(m, [(0, 9.0)] + stuck)
    assert step == 200 and "stopped improving" in reason                          # warmup 100 + window 100
    learned = [(s, 5.0) for s in range(10, 401, 10)]                              # flat, but below 0.75 * 9
    assert feed(HealthMonitor(100, 100), [(0, 9.0)] + learned) is None
    slow = [(s, 8.0 - s / 1000) for s in range(10, 401, 10)]                     # still improving > 1% per window
    assert feed(HealthMonitor(100, 100), [(0, 9.0)] + slow) is None


def test_validation_above_a_uniform_guess_fails_only_after_warmup_and_a_window():
    m = HealthMonitor(warmup_updates=100, window=50, vocab_size=8000)           # ln(8000) = 8.987
    assert m.check_valid(149, 9.5) is None                                       # an untrained model may: grace
    assert m.check_valid(150, 8.98) is None                                      # just below the uniform guess
    reason = m.check_valid(150, 8.99)
    assert reason and "diverged" in reason and "ln(8000) = 8.987" in reason
    assert "became nan" in m.check_valid(5, float("nan"))                        # never finite: always a failure
    assert HealthMonitor(100, 50).check_valid(300, 50.0) is None                 # no vocabulary given: no ceiling


def log_of(name: str) -> list[dict]:
    return [json.loads(line) for line in (REPO / "results/mini" / name).read_text().splitlines()]


def test_the_committed_deep_post_ln_log_fails_and_its_neighbours_do_not():
    """The 18L-18L Post-LN mini run trained to the end under the training-loss rules alone (training NLL near 5),
    while its validation NLL went from 5.2 to 11.4: the paper's "diverged". Replayed with the mini recipe's warmup
    (2,000), window (2,000) and vocabulary (8,000), it fails at update 6,000; B2T and the 6L-6L runs do not."""
    monitor = lambda: HealthMonitor(2000, effective_window(2000, 8000, 50), vocab_size=8000)
    step, reason = judge_log(log_of("18L-18L-post_ln/seed1.log.jsonl"), monitor())
    assert step == 6000 and "diverged to 11.36" in reason
    for name in ("18L-18L-b2t/seed1.log.jsonl", "6L-6L-post_ln/seed1.log.jsonl", "6L-6L-pre_ln/seed1.log.jsonl"):
        assert judge_log(log_of(name), monitor()) is None, name


def test_a_diverged_validation_ends_the_run_as_failed(tiny_root, tmp_path, monkeypatch):
    r = resolve(REPO / "recipes/6L-6L-post_ln.yaml", "tiny",
                ["optim.max_updates=30", "model.encoder_layers=2", "model.decoder_layers=2"])
    real = loop.validate
    calls = []

    def diverging(*args, **kwargs):  # the real validation, then a value above ln(V) from the fourth call on
        v = real(*args, **kwargs)
        calls.append(v)
        return v if len(calls) < 4 else 99.0

    monkeypatch.setattr(loop, "validate", diverging)
    status = train_run(r, tmp_path / "run", tiny_root)
    # warmup 2 + window 10 (ten logged losses): the validation at update 8 is in the grace, the one at 12 fails
    assert status["status"] == "failed" and "validation NLL diverged to 99.000 at update 12" in status["reason"]
    assert status["step"] == 12 and len(calls) == 6                              # stopped there, nothing after


def test_state_round_trip():
    m = HealthMonitor(10, 10)
    feed(m, [(1, 9.0), (2, 8.0)])
    n = HealthMonitor(10, 10)
    n.load_state_dict(json.loads(json.dumps(m.state_dict())))
    assert n.first_loss == 9.0 and n.history == [(1, 9.0), (2, 8.0)]


def test_forced_divergence_is_recorded_as_training_failed(tiny_root, tmp_path):
    r = resolve(REPO / "recipes/6L-6L-post_ln.yaml", "tiny",
                ["optim.lr=1.0", "optim.warmup_updates=1", "optim.max_updates=12", "model.encoder_layers=2",
                 "model.decoder_layers=2", "train.seed=2"])  # seed 2's loss explodes by update 5 (seed 1's stalls)
    status = train_run(r, tmp_path / "run", tiny_root)
    assert status["status"] == "failed", status
    assert any(w in status["reason"] for w in ("exploded", "became", "diverged")), status["reason"]
    assert status["step"] < 12
