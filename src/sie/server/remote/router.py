"""Which profile serves a request, local or remote, and the headers that say so.

As the public server decides it, per request:

- a request that reaches a remote profile (a ``remote_backed`` model, an ``{id}:{profile}`` variant
  or ``options.profile`` naming one) is served by its upstream: ``X-SIE-Served-By: remote`` and
  ``X-SIE-Upstream``;
- a request for the bare id of a model with ``routing.policy: fallback`` is served locally while the
  local profile can serve. When the local path refuses *before accepting the work* for one of the
  policy's ``triggers`` (``model_loading``: loading or not loaded, and the load starts;
  ``saturated``: its queue is full; ``unhealthy``: its load failed), the remote ``fallback_profile``
  serves it instead, with ``X-SIE-Fallback-Reason``. If that remote attempt fails too, the caller gets
  the local refusal (status, body, ``Retry-After``) with ``X-SIE-Served-By: local``, the reason and
  ``X-SIE-Fallback-Error`` (the remote failure's code). A request that names a profile, sets an
  instruction or options other than ``is_query`` is not bridged (its answer would differ from the
  local model's in ways the remote side cannot reproduce): it gets that refusal with
  ``X-SIE-Fallback-Error: INFERENCE_ERROR``.
- ``X-SIE-Remote: forbid`` keeps a request off every remote profile: the local profile serves or
  refuses it, and a model served only by an upstream answers 400. Any other value answers 400.

``provisioning`` (a cluster with no worker yet) never fires on a standalone server; ``threshold``
policies are served locally (the public server serves them only behind its threshold gateway).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from sie.catalog.catalog import CatalogEntry
from sie.catalog.errors import InvalidInput
from sie.catalog.model_config import Trigger
from sie.engine.engine import Engine
from sie.engine.ops.parts import Answer
from sie.errors import SieError
from sie.server.remote import serve
from sie.upstream.errors import SERVED_BY, remote_headers
from sie.upstream.pool import UpstreamPool
from sie.wire.errors import ErrorCode
from sie.wire.requests import EncodeRequest, ScoreRequest
from sie.wire.responses import EncodeResponse, ScoreResponse

REMOTE_HEADER: Final = "X-SIE-Remote"
FALLBACK_REASON: Final = "X-SIE-Fallback-Reason"
FALLBACK_ERROR: Final = "X-SIE-Fallback-Error"
LOCAL: Final = {SERVED_BY: "local"}
FORBID: Final = "forbid"
_TRIGGER_OF: Final[dict[object, Trigger]] = {
    ErrorCode.MODEL_LOADING: "model_loading",
    ErrorCode.MODEL_NOT_LOADED: "model_loading",
    ErrorCode.QUEUE_FULL: "saturated",
    ErrorCode.MODEL_LOAD_FAILED: "unhealthy",
}
# Options a bridged request may carry: its answer is still the default profile's.
_BRIDGEABLE_OPTIONS: Final = frozenset({"is_query"})

R = TypeVar("R")


@dataclass(frozen=True)
class Routed(Generic[R]):
    answer: Answer[R]
    headers: Mapping[str, str]


def forbids_remote(values: Sequence[str]) -> bool:
    """``X-SIE-Remote``: absent, or exactly ``forbid``; any other value is the caller's error."""
    if not values:
        return False
    if list(values) == [FORBID]:
        return True
    raise InvalidInput(f"{REMOTE_HEADER} accepts only '{FORBID}'")


def _bridgeable(options: Mapping[str, Any] | None, instruction: str | None) -> bool:
    return instruction is None and set(options or {}) <= _BRIDGEABLE_OPTIONS


class Router:
    """The engine for local profiles, the upstream pool for remote ones; routes call this."""

    def __init__(self, engine: Engine, pool: UpstreamPool) -> None:
        self.engine, self.pool = engine, pool

    async def encode(
        self, model: str, request: EncodeRequest, remote: Sequence[str], wait_loaded: bool = False
    ) -> Routed[EncodeResponse]:
        params = request.params
        options = params.options if params else None

        async def local(wait: bool) -> Answer[EncodeResponse]:
            return await self.engine.encode(model, request, wait_loaded=wait)

        async def upstream(entry: CatalogEntry) -> Answer[EncodeResponse]:
            return await serve.encode(self.pool, self.engine.admission, entry, request, model)

        instruction = params.instruction if params else None
        return await self._route(model, options, remote, wait_loaded, local, upstream, instruction)

    async def score(
        self, model: str, request: ScoreRequest, remote: Sequence[str], wait_loaded: bool = False
    ) -> Routed[ScoreResponse]:
        async def local(wait: bool) -> Answer[ScoreResponse]:
            return await self.engine.score(model, request, wait_loaded=wait)

        async def upstream(entry: CatalogEntry) -> Answer[ScoreResponse]:
            return await serve.score(self.pool, self.engine.admission, entry, request, model)

        return await self._route(
            model, request.options, remote, wait_loaded, local, upstream, request.instruction
        )

    async def _route(
        self,
        model: str,
        options: Mapping[str, Any] | None,
        remote: Sequence[str],
        wait_loaded: bool,
        local: Callable[[bool], Awaitable[Answer[R]]],
        upstream: Callable[[CatalogEntry], Awaitable[Answer[R]]],
        instruction: str | None,
    ) -> Routed[R]:
        forbid = forbids_remote(remote)
        admission = self.engine.admission
        profile = (options or {}).get("profile")
        entry = admission.require(admission.variant(model, profile))
        if entry.profile.is_remote:
            if forbid:
                raise InvalidInput(
                    f"Model '{entry.name}' is served only by an upstream, which {REMOTE_HEADER}: {FORBID} refuses"
                )
            return Routed(await upstream(entry), remote_headers(entry.profile.upstream or ""))
        routing = entry.config.routing
        if (
            forbid
            or profile is not None
            or routing is None
            or routing.policy != "fallback"
            or not self.pool.enabled
        ):
            return Routed(await local(wait_loaded), LOCAL)
        try:
            return Routed(await local(False), LOCAL)
        except SieError as refusal:
            trigger = _TRIGGER_OF.get(refusal.rule().code)
            if trigger is None or trigger not in routing.effective_triggers:
                if wait_loaded and trigger == "model_loading":
                    return Routed(await local(True), LOCAL)
                raise
            fallback = admission.catalog.get(f"{entry.config.sie_id}:{routing.fallback_profile}")
            if fallback is None:
                raise
            return await self._bridge(refusal, trigger, fallback, upstream, _bridgeable(options, instruction))

    async def _bridge(
        self,
        refusal: SieError,
        trigger: Trigger,
        fallback: CatalogEntry,
        upstream: Callable[[CatalogEntry], Awaitable[Answer[R]]],
        bridgeable: bool,
    ) -> Routed[R]:
        def told(code: str) -> SieError:
            refusal.extra_headers = {
                **refusal.extra_headers,
                SERVED_BY: "local",
                FALLBACK_REASON: trigger,
                FALLBACK_ERROR: code,
            }
            return refusal

        if not bridgeable:
            raise told(ErrorCode.INFERENCE_ERROR.value)
        try:
            answer = await upstream(fallback)
        except SieError as failure:
            raise told(failure.rule().code.value) from failure
        headers = {**remote_headers(fallback.profile.upstream or ""), FALLBACK_REASON: trigger}
        return Routed(answer, headers)
