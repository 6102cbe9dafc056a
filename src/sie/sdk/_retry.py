"""When an SDK call waits and tries again, and when it gives up: one pure object per call.

It reads no clock and never sleeps. The client passes in what happened (a status and error code, or
a transport exception) and the seconds elapsed since the call began; the policy answers with the
seconds to sleep, ``None`` when the answer is final, or raises the error that ends the call. Sync
and async clients share it unchanged, and the tests walk every row below without a network.

=============================================  ============================================
answer                                         behaviour
=============================================  ============================================
202, or 503 ``PROVISIONING``                   wait ``Retry-After`` (default 5 s) when
                                               ``wait_for_capacity``, else ProvisioningError
502 ``MODEL_LOAD_FAILED``                      final at once (ModelLoadFailedError)
503 ``LORA_LOADING``                           up to 10 retries, ``Retry-After`` or 1 s
503 ``MODEL_LOADING``                          until the budget, ``Retry-After`` or 5 s
503 ``RESOURCE_EXHAUSTED``                     up to ``max_oom_retries``: first ``Retry-After``
                                               (at most 30 s), then 5·2ⁿ s capped at 30 s
any other 503, and 504                         ``Retry-After`` or 5 s, when ``wait_for_capacity``
connect errors, broken connections             5 s, when ``wait_for_capacity``; a read timeout
                                               is never retried (the server may still be working)
=============================================  ============================================

A call that is not idempotent (generation: ``RetryLimits.idempotent`` False) keeps the first five rows
and a connect error, and retries no other 503 than ``QUEUE_FULL`` and ``MODEL_NOT_LOADED`` (or the
OpenAI routes' ``model_not_available`` / ``server_overloaded``): never a 504, an unknown 503 or a
connection broken after the request went out, which may each have run a generation.

Everything is bounded by ``provision_timeout_s`` (900 s by default). The LoRA and loading rows run
whatever ``wait_for_capacity`` says: the server accepted the work and only asks for a moment.
"""

from __future__ import annotations

import errno
import logging
import math
import random
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Final

import httpx

from sie.sdk._errors import LoraLoadingError, ModelLoadingError, ProvisioningError, ResourceExhaustedError
from sie.wire.errors import ErrorCode

logger = logging.getLogger("sie.sdk")

DEFAULT_PROVISION_TIMEOUT_S: Final = 900.0
CAPACITY_DELAY_S: Final = 5.0
LORA_LOADING_MAX_RETRIES: Final = 10
LORA_LOADING_DELAY_S: Final = 1.0
MODEL_LOADING_DELAY_S: Final = 5.0
RESOURCE_EXHAUSTED_MAX_RETRIES: Final = 3
RESOURCE_EXHAUSTED_BASE_DELAY_S: Final = 5.0
RESOURCE_EXHAUSTED_MAX_DELAY_S: Final = 30.0
JITTER_FRACTION: Final = 0.25

# Connect failures worth a retry; anything else (TLS, unknown host, permission) fails at once.
_TRANSIENT_ERRNOS: Final = frozenset(
    getattr(module, name)
    for module, name in (
        (errno, "ECONNREFUSED"),
        (errno, "ECONNRESET"),
        (errno, "ETIMEDOUT"),
        (errno, "EHOSTUNREACH"),
        (errno, "ENETUNREACH"),
        (errno, "ENETDOWN"),
        (errno, "EHOSTDOWN"),
        (socket, "EAI_AGAIN"),
    )
    if hasattr(module, name)
)
_CONNECT_ERRORS: Final = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# The 503s that say a call was refused before any work began (native codes, and the OpenAI routes'
# codes for the same refusals): all a non-idempotent call (generation) retries besides the rows above.
_REFUSED_BEFORE_WORK: Final = frozenset(
    {ErrorCode.QUEUE_FULL, ErrorCode.MODEL_NOT_LOADED, "model_not_available", "server_overloaded"}
)
_BROKEN_CONNECTION_ERRORS: Final = (
    httpx.WriteTimeout,
    httpx.WriteError,
    httpx.ReadError,
    httpx.RemoteProtocolError,
)

Jitter = Callable[[float], float]


def downward_jitter(delay: float) -> float:
    """A delay drawn from [75 %, 100 %] of ``delay``, so clients cut off together do not return together.

    Only downwards, so a delay already capped to the remaining budget stays within it.
    """
    if delay <= 0:
        return 0.0
    return random.uniform(delay * (1 - JITTER_FRACTION), delay)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from a ``Retry-After`` header (number or HTTP date); ``None`` when absent or unusable."""
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        now = datetime.now(when.tzinfo) if when.tzinfo else datetime.now(UTC).replace(tzinfo=None)
        return max((when - now).total_seconds(), 0.0)
    # nan would crash time.sleep and a negative value would busy-loop asyncio.sleep.
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def is_transient_connect_error(error: BaseException) -> bool:
    """Whether a connect failure is worth retrying, judged by the errno somewhere in its cause chain."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            return False
        if isinstance(current, OSError) and current.errno is not None:
            return current.errno in _TRANSIENT_ERRNOS
        current = current.__cause__ or current.__context__
    return True  # no errno to judge by (e.g. a bare ConnectError): treat as transient


@dataclass(frozen=True, slots=True)
class RetryLimits:
    """The per-call knobs of the public API, with its defaults."""

    wait_for_capacity: bool = True
    provision_timeout_s: float = DEFAULT_PROVISION_TIMEOUT_S
    max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES
    # Generation is not: once a request was sent it may be running, so a 504 or a connection broken
    # mid-call is never retried (a second call could bill a second, different completion).
    idempotent: bool = True


class RetryPolicy:
    """The retry state of one call: its counters, and whether a last attempt past the budget is owed."""

    def __init__(
        self,
        limits: RetryLimits,
        *,
        model: str,
        gpu: str | None = None,
        lora: str | None = None,
        jitter: Jitter = downward_jitter,
    ) -> None:
        self.limits = limits
        self.model = model
        self.gpu = gpu
        self.lora = lora
        self._jitter = jitter
        self.lora_retries = 0
        self.oom_retries = 0
        self.transport_retries = 0
        self._final_attempt_owed = False

    @property
    def budget_s(self) -> float:
        return self.limits.provision_timeout_s

    def attempt_cap(self, elapsed: float) -> float:
        """The cap on the next attempt's timeouts; raises when the budget is spent.

        After a capacity wait that slept right up to the deadline, one more attempt is owed (with no
        cap), so the caller learns how that wait ended rather than getting a bare timeout.
        """
        remaining = self.budget_s - elapsed
        owed, self._final_attempt_owed = self._final_attempt_owed, False
        if remaining <= 0 and not owed:
            raise ProvisioningError(
                f"Provision timeout ({self.budget_s:.1f}s) exceeded before request could be sent",
                gpu=self.gpu,
            )
        return remaining if remaining > 0 else math.inf

    def after_response(
        self, status: int, code: str | None, retry_after: float | None, elapsed: float
    ) -> float | None:
        """Seconds to sleep before trying again, or ``None`` when this answer is final (return or raise)."""
        if status == 202 or (status == 503 and code == ErrorCode.PROVISIONING):
            return self._provisioning(retry_after, elapsed)
        if status == 503 and code == ErrorCode.LORA_LOADING:
            return self._lora_loading(retry_after)
        if status == 503 and code == ErrorCode.MODEL_LOADING:
            return self._model_loading(retry_after, elapsed)
        if status == 503 and code == ErrorCode.RESOURCE_EXHAUSTED:
            return self._resource_exhausted(retry_after, elapsed)
        if self.limits.idempotent:
            retried = status in (503, 504)
        else:  # only a refusal before any work: a 504 or an unknown 503 may have run the generation
            retried = status == 503 and code in _REFUSED_BEFORE_WORK
        if retried and self.limits.wait_for_capacity and elapsed < self.budget_s:
            delay = min(CAPACITY_DELAY_S if retry_after is None else retry_after, self.budget_s - elapsed)
            logger.info("HTTP %d from the server, retrying in %.1fs", status, delay)
            self._final_attempt_owed = True  # so a wait cut short by the deadline ends in the server's answer
            return delay
        return None  # success, 502 MODEL_LOAD_FAILED, or an error the caller raises as is

    def after_transport_error(self, error: httpx.TransportError, elapsed: float) -> float | None:
        """Seconds to sleep after a failed send, or ``None`` when the caller should raise."""
        if not self.limits.wait_for_capacity or elapsed >= self.budget_s:
            return None
        if isinstance(error, _CONNECT_ERRORS):
            if not is_transient_connect_error(error):
                return None
        elif not isinstance(error, _BROKEN_CONNECTION_ERRORS) or not self.limits.idempotent:
            return None  # read timeouts and the rest: the server may have done the work already
        delay = self._jitter(min(CAPACITY_DELAY_S, self.budget_s - elapsed))
        log = logger.warning if self.transport_retries == 0 else logger.info
        log("%s talking to the server, retrying in %.1fs: %s", type(error).__name__, delay, error)
        self.transport_retries += 1
        return delay

    def _provisioning(self, retry_after: float | None, elapsed: float) -> float:
        if not self.limits.wait_for_capacity:
            raise ProvisioningError(
                f"No capacity available for GPU '{self.gpu}'. Server is provisioning.",
                gpu=self.gpu,
                retry_after=retry_after,
            )
        if elapsed >= self.budget_s:
            raise ProvisioningError(
                f"Provisioning timeout after {elapsed:.1f}s waiting for GPU '{self.gpu}'",
                gpu=self.gpu,
                retry_after=retry_after,
            )
        remaining = self.budget_s - elapsed
        delay = (
            min(retry_after, remaining)
            if retry_after is not None
            else self._jitter(min(CAPACITY_DELAY_S, remaining))
        )
        logger.debug("Provisioning in progress, retrying in %.1fs", delay)
        self._final_attempt_owed = True
        return delay

    def _lora_loading(self, retry_after: float | None) -> float:
        self.lora_retries += 1
        if self.lora_retries > LORA_LOADING_MAX_RETRIES:
            raise LoraLoadingError(
                f"LoRA loading timeout after {self.lora_retries} retries", lora=self.lora, model=self.model
            )
        return LORA_LOADING_DELAY_S if retry_after is None else retry_after

    def _model_loading(self, retry_after: float | None, elapsed: float) -> float:
        if elapsed >= self.budget_s:
            raise ModelLoadingError(
                f"Model loading timeout after {elapsed:.1f}s for '{self.model}'", model=self.model
            )
        delay = min(MODEL_LOADING_DELAY_S if retry_after is None else retry_after, self.budget_s - elapsed)
        logger.info("Model %s is loading, retrying in %.1fs", self.model, delay)
        self._final_attempt_owed = True
        return delay

    def _resource_exhausted(self, retry_after: float | None, elapsed: float) -> float:
        """Bounded exponential backoff; gives up early rather than sleep away the whole budget.

        Giving up early surfaces the real cause (memory) instead of a later, misleading
        "provision timeout".
        """
        attempt = self.oom_retries
        if attempt < self.limits.max_oom_retries and elapsed < self.budget_s:
            if retry_after is not None and attempt == 0:
                delay = min(retry_after, RESOURCE_EXHAUSTED_MAX_DELAY_S)  # the server's word, unjittered
            else:
                base = max(RESOURCE_EXHAUSTED_BASE_DELAY_S, retry_after or 0.0)
                delay = self._jitter(min(base * 2**attempt, RESOURCE_EXHAUSTED_MAX_DELAY_S))
            if delay < self.budget_s - elapsed:
                # The first retry is a WARNING so that a slow call is explained at the default log level.
                log = logger.warning if attempt == 0 else logger.info
                log(
                    "Server out of memory for %s, retrying in %.1fs (retry %d)",
                    self.model,
                    delay,
                    attempt + 1,
                )
                self.oom_retries += 1
                return delay
        raise ResourceExhaustedError(
            f"Server resource exhausted after {attempt} retry attempt(s) for model '{self.model}'",
            model=self.model,
            retries=attempt,
            retry_after=retry_after,
        )
