"""Cooldowns of failing upstreams, as LiteLLM's router has them: an upstream (a pool model) that fails
``allowed_fails`` times within ``window_s`` is skipped for ``cooldown_s`` (requests go straight to the next model of
their fallback chain instead of waiting for it), then tried again; its first failure after a cooldown starts the
next one at once, a success ends its record. What counts as a failure: whatever moves down the fallback chain
(upstream.UpstreamFailed: a timeout, a connection error, a 5xx or retryable status, an unusable answer)."""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Callable

log = logging.getLogger("locus.serve")


class Cooldowns:
    def __init__(
        self,
        *,
        allowed_fails: int = 3,
        window_s: float = 60.0,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        on_cooldown: Callable[[str], None] | None = None,
    ) -> None:
        self.allowed_fails, self.window_s, self.cooldown_s, self.clock = allowed_fails, window_s, cooldown_s, clock
        self.on_cooldown = on_cooldown
        self.failures: dict[str, deque[float]] = {}  # per model, the failure times within the window
        self.until: dict[str, float] = {}  # per model cooled down (or on probation after it), the cooldown's end

    def remaining(self, model: str) -> float:
        """Seconds ``model`` stays cooled down (0: it may be tried)."""
        end = self.until.get(model)
        return 0.0 if end is None else max(end - self.clock(), 0.0)

    def cooled_down(self) -> int:
        """How many upstreams are cooled down now."""
        now = self.clock()
        return sum(end > now for end in self.until.values())

    def failed(self, model: str) -> bool:
        """Record a failure of ``model``; True when it cools the model down."""
        now = self.clock()
        if model in self.until:  # tried again after a cooldown and failed: cooled down again at once
            return self._cool(model, now, "failed again after its cooldown")
        times = self.failures.setdefault(model, deque())
        times.append(now)
        while times and now - times[0] > self.window_s:
            times.popleft()
        if len(times) >= self.allowed_fails:
            return self._cool(model, now, f"failed {len(times)} times in {self.window_s:g} s")
        return False

    def succeeded(self, model: str) -> None:
        if self.until.pop(model, None) is not None:
            log.info("upstream %s answered after its cooldown: back in service", model)
        self.failures.pop(model, None)

    def _cool(self, model: str, now: float, why: str) -> bool:
        self.until[model] = now + self.cooldown_s
        self.failures.pop(model, None)
        log.warning(
            "upstream %s %s: cooled down for %g s (skipped by the fallback chain, then tried again)",
            model,
            why,
            self.cooldown_s,
        )
        if self.on_cooldown:
            self.on_cooldown(model)
        return True
