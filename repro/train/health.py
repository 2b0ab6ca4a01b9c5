"""When a run has failed to train, decided the way the paper reports it (Fig. 1, Fig. 6: the loss stays high).

A run fails when its loss is not finite, or when, after warmup, the loss has not improved over `window` updates
while still far above where training started (above `stuck_fraction` of the first logged loss). A run that
trains but lags others is not a failure here: the claims check compares runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class HealthMonitor:
    warmup_updates: int
    window: int
    stuck_fraction: float = 0.75
    min_improvement: float = 0.01
    first_loss: float | None = None
    history: list[tuple[int, float]] = field(default_factory=list)

    def check(self, step: int, loss: float) -> str | None:
        """Record one logged (step, mean loss); return the failure reason, or None while healthy."""
        if not math.isfinite(loss):
            return f"loss became {loss} at update {step}"
        if self.first_loss is None:
            self.first_loss = loss
        self.history.append((step, loss))
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

    def state_dict(self) -> dict:
        return {"first_loss": self.first_loss, "history": self.history}

    def load_state_dict(self, state: dict) -> None:
        self.first_loss = state["first_loss"]
        self.history = [tuple(x) for x in state["history"]]
