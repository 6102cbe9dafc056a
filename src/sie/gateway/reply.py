"""A request's work results back into the standalone server's response.

Each result carries its item's answer as the worker's msgpack bytes; a msgpack response splices them
into the reply unread (``msgspec.Raw``), so an embedding is encoded once, on the worker. A JSON
response decodes them and renders the server's JSON. The body has the server's shape
(``{model, items, timing, usage}`` for encode, ``{model, query_id, scores, usage}`` for score,
``{model, items, usage}`` for extract; ``usage`` the answers' units summed); items that failed while others succeeded are listed under
``errors`` (``item_index``, ``code``, ``message``) and left out of ``items``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import msgspec

from sie.queue.contract import Operation, WorkResult
from sie.queue.units import plain, summed
from sie.wire import codec
from sie.wire.arrays import object_hook
from sie.wire.responses import ScoreUsage, Timing


@dataclass(frozen=True)
class Gathered:
    """A request's results in item order, split into answers and failures."""

    answers: list[WorkResult]
    failures: list[WorkResult]
    usage: ScoreUsage  # the answers' units summed (``sie.queue.units``)

    @classmethod
    def of(cls, results: Sequence[WorkResult]) -> Gathered:
        answers = [r for r in results if r.success and r.result_msgpack is not None]
        failures = [r for r in results if not (r.success and r.result_msgpack is not None)]
        return cls(answers, failures, summed([r.units for r in answers]))

    def timing(self, total_ms: float) -> Timing:
        def most(values: list[float | None]) -> float:
            return max((v for v in values if v is not None), default=0.0)

        post = [r.postprocessing_ms for r in self.answers if r.postprocessing_ms is not None]
        return Timing(
            total_ms=total_ms,
            queue_ms=most([r.queue_ms for r in self.answers]),
            tokenization_ms=most([r.tokenization_ms for r in self.answers]),
            inference_ms=most([r.inference_ms for r in self.answers]),
            postprocessing_ms=max(post) if post else None,
        )


def _decoded(raw: bytes) -> Any:
    return msgpack.unpackb(raw, object_hook=object_hook, raw=False, strict_map_key=False)


def render(
    operation: str,
    model: str,
    query_id: str | None,
    gathered: Gathered,
    total_ms: float,
    *,
    as_json: bool,
) -> bytes:
    """The response body; ``as_json`` decodes the workers' bytes, msgpack splices them."""

    def answer(result: WorkResult) -> Any:
        raw = result.result_msgpack or b""
        return _decoded(raw) if as_json else msgspec.Raw(raw)

    body: dict[str, Any] = {"model": model}
    if operation == Operation.SCORE:
        body["query_id"] = query_id
        body["scores"] = answer(gathered.answers[0]) if gathered.answers else []
        body["usage"] = gathered.usage
    else:
        body["items"] = [answer(r) for r in gathered.answers]
        if operation == Operation.ENCODE:
            body["timing"] = gathered.timing(total_ms)
        body["usage"] = plain(gathered.usage)
    if gathered.failures:
        body["errors"] = [
            {"item_index": r.item_index, "code": r.error_code, "message": r.error} for r in gathered.failures
        ]
    return codec.encode(body, as_json=as_json)
