"""When a run has failed to train, decided the way the paper reports it (Fig. 1, Fig. 6: the loss stays high).

One rule, for every scale. A run fails when, at a logged update:
- its loss is not finite;
- its loss has exploded: above `explode_factor` times the first logged loss, i.e. far worse than the untrained
  model it started as (a finite blow-up, such as 18L-18L B2T without LN reaching 20,000 nats per token);
- after warmup, its loss has not improved by `min_improvement` (relative) over the last `window` updates while
  still above `stuck_fraction` of the first logged loss (it never learned). The window is the recipe's
  `train.divergence_window`, capped at a quarter of the run so that a short run can fail too, and never shorter
  than ten logged losses;
- after warmup and one window, its validation NLL is above ln(V), the NLL of a uniform guess over its V output words: the model
  is worse on held-out data than one that knows nothing (the paper's Fig. 6 note: "NLL of Post-LN diverged"). The
  training loss of such a run can look settled (18L-18L Post-LN at mini: training NLL near 5 while its validation
  NLL climbed from 5.2 to 11.4 nats), so the training-loss rules alone miss it.
A run that trains but lags others is not a failure here: the claims check compares runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def effective_window(divergence_window: int, max_updates: int, log_interval: int) -> int:
    """The stuck-loss window: the recipe's, at most a quarter of the run, at least ten logged losses to judge by."""
    return max(10 * log_interval, min(divergence_window, max_updates // 4))


@dataclass
class HealthMonitor:
    warmup_updates: int
    window: int
    stuck_fraction: float = 0.75
    min_improvement: float = 0.01
    explode_factor: float = 2.0
    vocab_size: int | None = None
    first_loss: float | None = None
    history: list[tuple[int, float]] = field(default_factory=list)

    def check(self, step: int, loss: float) -> str | None:
        """Record one logged (step, mean loss); return the failure reason, or None while healthy."""
        if not math.isfinite(loss):
            return f"loss became {loss} at update {step}"
        if self.first_loss is None:
            self.first_loss = loss
        self.history.append((step, loss))
        if loss > self.explode_factor * self.first_loss:
            return (f"loss exploded to {loss:.3f} at update {step} (over {self.explode_factor:g} times the first "
                    f"logged loss, {self.first_loss:.3f})")
        if step < self.warmup_updates + self.window:
            return None
        recent = [l for s, l in self.history if s > step - self.window]
        earlier = [l for s, l in self.history if s <= step - self.window]
        if not earlier or not recent:
            return None
        improved = min(earlier) - min(recent) > self.min_improvement * min(earlier)
        if not improved and min(recent) > self.stuck_fraction * self.first_loss:
            return (f"loss stopped improving at {min(recent):.3f} (started at {self.first_loss:.3f}) "
                    f"over the {self.window} updates before update {step}")
        return None

    def check_valid(self, step: int, valid_nll: float) -> str | None:
        """Judge one validation NLL; return the failure reason, or None while healthy. An untrained model scores
        above a uniform guess (its logits are not flat), so a validation counts only after the grace the stuck rule
        gives: warmup plus one window."""
        if not math.isfinite(valid_nll):
            return f"validation NLL became {valid_nll} at update {step}"
        if self.vocab_size is None or step < self.warmup_updates + self.window:
            return None
        uniform = math.log(self.vocab_size)
        if valid_nll > uniform:
            return (f"validation NLL diverged to {valid_nll:.3f} at update {step}, above ln({self.vocab_size}) = "
                    f"{uniform:.3f}, a uniform guess over the vocabulary")
        return None

    def state_dict(self) -> dict:
        return {"first_loss": self.first_loss, "history": self.history}

    def load_state_dict(self, state: dict) -> None:
        self.first_loss = state["first_loss"]
        self.history = [tuple(x) for x in state["history"]]


def judge_log(rows: list[dict], monitor: HealthMonitor) -> tuple[int, str] | None:
    """Replay a run's log (`log.jsonl` rows, in order) through a monitor: the first (update, reason) at which the
    rule fails the run, or None. Training rows carry `loss`, validation rows `valid_nll`."""
    for row in rows:
        if "loss" in row:
            reason = monitor.check(row["step"], row["loss"])
        elif "valid_nll" in row:
            reason = monitor.check_valid(row["step"], row["valid_nll"])
        else:
            continue
        if reason:
            return row["step"], reason
    return None
