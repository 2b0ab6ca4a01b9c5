"""The training-failure rule (repro/train/health.py) at each of its edges, and on a real tiny run."""

import json
from pathlib import Path

from repro.config import resolve
from repro.train.health import HealthMonitor, effective_window
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


def test_state_round_trip():
    m = HealthMonitor(10, 10)
    feed(m, [(1, 9.0), (2, 8.0)])
    n = HealthMonitor(10, 10)
    n.load_state_dict(json.loads(json.dumps(m.state_dict())))
    assert n.first_loss == 9.0 and n.history == [(1, 9.0), (2, 8.0)]


def test_forced_divergence_is_recorded_as_training_failed(tiny_root, tmp_path):
    r = resolve(REPO / "recipes/6L-6L-post_ln.yaml", "tiny",
                ["optim.lr=1.0", "optim.warmup_updates=1", "optim.max_updates=12", "model.encoder_layers=2", "model.decoder_layers=2"])
    status = train_run(r, tmp_path / "run", tiny_root)
    assert status["status"] == "failed", status
    assert "exploded" in status["reason"] or "became" in status["reason"]
    assert status["step"] < 12
