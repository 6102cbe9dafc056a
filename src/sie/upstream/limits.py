"""This process's limits on the calls to one upstream, from its ``rate_cap`` and ``breaker``.

- a budget of ``requests_per_minute`` calls, refilled continuously, holding one minute's worth;
- at most ``max_concurrency`` calls in flight;
- a circuit breaker: ``failures`` unavailable answers in a row within ``window_s`` stop every call for
  ``cooldown_s``; after it one call probes, and its success closes the breaker.

A call over a limit is refused at once with the wait until it would pass (``Refused``), never queued:
a hosted API's bill and rate limit are the operator's, and a queue here would only hide them. The
limits hold per process. No asyncio and no clock reads: the caller passes ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sie.upstream.config import Breaker, RateCap
from sie.upstream.errors import FailureKind


@dataclass(frozen=True)
class Refused:
    kind: FailureKind
    wait_s: float


class Limiter:
    def __init__(self, rate_cap: RateCap, breaker: Breaker, now: float) -> None:
        self._rate, self._breaker = rate_cap, breaker
        self._tokens = float(rate_cap.requests_per_minute)
        self._refilled = now
        self._in_flight = 0
        self._failures: list[float] = []
        self._open_until: float | None = None
        self._probing = False

    def acquire(self, now: float) -> Refused | None:
        """Take one call's slot and budget, or say why not and for how long."""
        if self._open_until is not None:
            if now < self._open_until:
                return Refused("unavailable", self._open_until - now)
            if self._probing:
                return Refused("unavailable", 1.0)
            self._probing = True  # the cooldown is over: this call probes
        per_s = self._rate.requests_per_minute / 60
        self._tokens = min(self._rate.requests_per_minute, self._tokens + (now - self._refilled) * per_s)
        self._refilled = now
        refusal = None
        if self._in_flight >= self._rate.max_concurrency:
            refusal = Refused("busy", 1.0)
        elif self._tokens < 1:
            refusal = Refused("busy", (1 - self._tokens) / per_s)
        if refusal is not None:
            self._probing = False
            return refusal
        self._tokens -= 1
        self._in_flight += 1
        return None

    def release(self, now: float, unavailable: bool) -> None:
        """The call ended; ``unavailable`` when the upstream could not be reached or answered 5xx."""
        self._in_flight -= 1
        if not unavailable:
            self._failures.clear()
            self._open_until, self._probing = None, False
            return
        if self._probing:  # the probe failed: closed again for a whole cooldown
            self._open_until, self._probing = now + self._breaker.cooldown_s, False
            return
        horizon = now - self._breaker.window_s
        self._failures = [t for t in self._failures if t >= horizon] + [now]
        if len(self._failures) >= self._breaker.failures:
            self._open_until = now + self._breaker.cooldown_s
            self._failures.clear()
