"""The engine both front ends call: one method per operation, a wire request in, an ``Answer`` out.

The HTTP routes decode a body, call one of these and encode the answer; the queue worker does the same
with a work item. Everything between (admission, profile variants, planning, model residency, batching,
assembly) sits behind this facade:

- ``registry.ModelRegistry``: the served models, their states, loads, eviction, workers and LoRAs;
- ``infer.Infer``: the one submit path (prepare on the loop or the pool, queue, await every item);
- ``ops.encode`` / ``ops.score`` / ``ops.extract``: each operation from admission to its response;
- ``ops.generate``: a generative model's stream of text, for the generation routes.

Use it as an async context manager (``async with Engine(...) as engine``), or call ``start`` and
``close`` where a framework's lifespan owns the order.
"""

from __future__ import annotations

from collections.abc import Awaitable
from types import TracebackType
from typing import Any, TypeVar

from sie.catalog.admission import Admission
from sie.catalog.catalog import Catalog, CatalogEntry
from sie.catalog.errors import InvalidInput
from sie.engine.infer import Infer
from sie.engine.loader import LoadSettings, ModelSlot
from sie.engine.ops import encode, extract, generate, score
from sie.engine.ops.generate import GenerationAsk, Running
from sie.engine.ops.parts import Answer, Parts
from sie.engine.registry import EngineLimits, ModelRegistry
from sie.observability import tracing
from sie.observability.metrics import Metrics
from sie.wire.requests import EncodeRequest, ExtractRequest, ScoreRequest
from sie.wire.responses import EncodeResponse, ExtractResponse, ScoreResponse

__all__ = ["Answer", "Engine", "EngineLimits"]


class Engine:
    def __init__(self, catalog: Catalog, load: LoadSettings, limits: EngineLimits, metrics: Metrics) -> None:
        self.registry = ModelRegistry(catalog, load, limits, metrics)
        self._infer = Infer(limits.preprocessor_workers, limits.images, limits.image_workers)
        self._parts = Parts(self.registry, self._infer, metrics, limits.request)

    # -- lifetime -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Background work that needs the running loop (the memory and idle watcher)."""
        self.registry.start()

    async def __aenter__(self) -> Engine:
        self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop intake, fail queued work, unload models, stop the pools; the event loop only awaits."""
        self._infer.close()
        await self.registry.close()

    # -- the three operations -------------------------------------------------------------------------
    # ``wait_loaded``: a cold model is loaded before answering (after the request's own checks) instead
    # of ``ModelLoading``, for clients that do not honour ``Retry-After`` (OpenAI, rerank).

    async def encode(
        self, model: str, request: EncodeRequest, *, wait_loaded: bool = False
    ) -> Answer[EncodeResponse]:
        call = encode.encode(self._parts, model, request, wait_loaded)
        if not tracing.enabled():
            return await call
        params = request.params
        output_types = (
            ",".join(str(t) for t in params.output_types) if params and params.output_types else None
        )
        return await _traced("encode", call, model, len(request.items), output_types=output_types)

    async def score(
        self, model: str, request: ScoreRequest, *, wait_loaded: bool = False
    ) -> Answer[ScoreResponse]:
        call = score.score(self._parts, model, request, wait_loaded)
        if not tracing.enabled():
            return await call
        return await _traced("score", call, model, len(request.items))

    async def extract(
        self, model: str, request: ExtractRequest, *, wait_loaded: bool = False
    ) -> Answer[ExtractResponse]:
        call = extract.extract(self._parts, model, request, wait_loaded)
        if not tracing.enabled():
            return await call
        return await _traced("extract", call, model, len(request.items))

    # -- generation ----------------------------------------------------------------------------------

    def require_generator(self, model: str) -> None:
        """``model`` is a served generative id, else its refusal (routes check before the body's own
        rules, as the other routes check the model first)."""
        generate.generator_entry(self._parts, model)

    async def generate(self, model: str, ask: GenerationAsk, *, wait_loaded: bool = False) -> Running:
        """A generation checked and queued (every refusal is raised here); read its ``events``."""
        return await generate.start(self._parts, model, ask, wait_loaded)

    # -- what front ends ask besides ------------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        return self.registry.catalog

    @property
    def device(self) -> str:
        return self.registry.device

    @property
    def admission(self) -> Admission:
        """The request checks against the catalogue as it is now, for a front end's first look at a body."""
        return self._parts.admission

    def require(self, model: str) -> CatalogEntry:
        """The entry of a served id, else ``ModelNotFound`` (routes check before reading the body)."""
        return self.registry.require(model)

    def slots(self) -> list[ModelSlot]:
        return self.registry.slots()

    def queue_depth(self, model: str) -> int:
        return self.registry.queue_depth(model)

    async def preload(self, models: list[str]) -> None:
        await self.registry.preload(models)

    async def wait_loaded(self, model: str) -> None:
        await self.registry.wait_loaded(model)

    async def apply_catalog(self, catalog: Catalog, drain_s: float = 30.0) -> None:
        await self.registry.apply_catalog(catalog, drain_s)

    async def detokenize(self, model: str, token_lists: list[list[int]]) -> list[str]:
        """Text for token-id inputs (OpenAI clients may send ids); ids outside the vocabulary are invalid."""
        await self.registry.wait_loaded(model)
        loaded, _ = self.registry.ready(model)
        tokenizer = loaded.adapter.tokenizer
        vocab = tokenizer.vocab_size
        for ids in token_lists:
            bad = next((i for i in ids if not 0 <= i < vocab), None)
            if bad is not None:
                raise InvalidInput(
                    f"Token id {bad} is outside the vocabulary of model '{model}' (size {vocab})"
                )
        return [tokenizer.decode(ids) for ids in token_lists]


R = TypeVar("R")


async def _traced(
    name: str, call: Awaitable[Answer[R]], model: str, items: int, **attributes: Any
) -> Answer[R]:
    """The operation's span (``observability.tracing``) with its measured phases as children; ``call``
    is a coroutine not started yet, so all of it runs inside the span."""
    with tracing.span(name, model=model, batch_size=items, **attributes) as span:
        answer = await call
        tracing.record_phases(span, answer.timing)
        return answer
