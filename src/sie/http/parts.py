"""What the server's routes and the gateway's share about HTTP paths and headers: the
``{model:model_id}`` path convertor (``model_path``), the timing headers and the usage headers."""

from __future__ import annotations

from typing import Final

from starlette.convertors import Convertor, register_url_convertor

from sie import __version__
from sie.wire.responses import ScoreUsage, Timing, Usage


class ModelIdConvertor(Convertor[str]):
    """``{model:model_id}``: like Starlette's ``path`` (the id's ``/`` stays in it: ``BAAI/bge-m3``),
    but across line breaks too. ``path`` matches ``.*``, which stops at a newline, so an id holding
    one matched no route and got FastAPI's bare ``{"detail": "Not Found"}`` instead of
    ``MODEL_NOT_FOUND``."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


MODEL_ID: Final = "model_id"
# Registered on import, since routes compile their paths when they are declared (at their module's
# import); a route module names it through ``model_path``, so the import is a use, not a side effect.
register_url_convertor(MODEL_ID, ModelIdConvertor())


def model_path(prefix: str) -> str:
    """``{prefix}/{model:model_id}``: a route whose last part is a model id, ``/``s and all."""
    return f"{prefix}/{{model:{MODEL_ID}}}"


def timing_headers(timing: Timing) -> dict[str, str]:
    headers = {
        "X-SIE-Server-Version": __version__,
        "X-Queue-Time": f"{timing.queue_ms:.2f}",
        "X-Tokenization-Time": f"{timing.tokenization_ms:.2f}",
        "X-Inference-Time": f"{timing.inference_ms:.2f}",
        "X-Total-Time": f"{timing.total_ms:.2f}",
        "X-SIE-Served-By": "local",
    }
    if timing.postprocessing_ms is not None:
        headers["X-Postprocessing-Time"] = f"{timing.postprocessing_ms:.2f}"
    return headers


def usage_headers(usage: Usage | ScoreUsage | None) -> dict[str, str]:
    """The body's ``usage`` again as the metering headers the public SDK reads into each result's
    ``request["usage"]`` (its only source of an encode's usage): ``X-SIE-Units-Input-Tokens``,
    ``-Images`` and ``-Content-Input-Tokens``, each only where the body counts it."""
    if usage is None:
        return {}
    headers = {"X-SIE-Units-Input-Tokens": str(usage.input_tokens)}
    if usage.images is not None:
        headers["X-SIE-Units-Images"] = str(usage.images)
    if isinstance(usage, ScoreUsage) and usage.input_tokens_details is not None:
        headers["X-SIE-Units-Content-Input-Tokens"] = str(usage.input_tokens_details.content_tokens)
    return headers
