"""``POST /v1/embeddings``, the OpenAI embeddings API, so the ``openai`` client works unchanged.

Beyond the public SIE: token-id inputs are accepted (decoded with the model's tokenizer), usage counts
real tokens, and ``dimensions`` truncates and re-normalises (Matryoshka-style) instead of being refused.
Errors use OpenAI's ``{"error": {...}}`` envelope; a body that is not JSON gets
FastAPI's 422 body, as the public server (a FastAPI route) answers.
"""

from __future__ import annotations

import base64

import msgspec
import numpy as np
from fastapi import Request, Response
from fastapi.responses import JSONResponse

from sie.engine.engine import Engine
from sie.engine.error_rules import rule_for
from sie.engine.errors import EngineError
from sie.postprocess.quantize import l2_normalize
from sie.server.api.native import PostRoute, engine_of, render_off_loop_if_big
from sie.wire import codec
from sie.wire.errors import openai_error_envelope
from sie.wire.requests import EncodingFormat, Item, OpenAIEmbeddingsRequest
from sie.wire.responses import OpenAIEmbedding, OpenAIEmbeddingsResponse, OpenAIUsage


class OpenAIError(Exception):
    def __init__(
        self, status: int, message: str, code: str, error_type: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.error_type = status, code, error_type

    def response(self) -> JSONResponse:
        headers = {"Retry-After": "1"} if self.status == 503 else None
        body = openai_error_envelope(str(self), self.code, self.error_type)
        return JSONResponse(body, status_code=self.status, headers=headers)


def _unprocessable(exc: Exception) -> JSONResponse:
    kind = "json_invalid" if isinstance(exc, msgspec.DecodeError) else "value_error"
    detail = [
        {
            "type": kind,
            "loc": ["body"],
            "msg": "JSON decode error" if kind == "json_invalid" else str(exc),
            "input": {},
            "ctx": {"error": str(exc)},
        }
    ]
    return JSONResponse({"detail": detail}, status_code=422)


async def _texts(engine: Engine, request: OpenAIEmbeddingsRequest) -> list[str]:
    raw = request.input
    if isinstance(raw, str):
        return [raw]
    if not raw:
        raise OpenAIError(400, "Input cannot be empty", "invalid_request")
    if all(isinstance(v, str) for v in raw):
        return [str(v) for v in raw]
    ids = [v for v in raw if isinstance(v, int)]
    if len(ids) == len(raw):
        return await engine.detokenize(request.model, [ids])
    id_lists = [v for v in raw if isinstance(v, list)]
    if len(id_lists) == len(raw):
        if any(not one for one in id_lists):
            raise OpenAIError(400, "Input cannot be empty", "invalid_request")
        return await engine.detokenize(request.model, id_lists)
    raise OpenAIError(
        400,
        "'input' must be a string, strings, token ids or lists of token ids, not a mix",
        "invalid_request",
    )


def _vectors(matrix: np.ndarray, dimensions: int | None, model: str) -> np.ndarray:
    if dimensions is None or dimensions == matrix.shape[1]:
        return matrix
    if not 1 <= dimensions <= matrix.shape[1]:
        raise OpenAIError(
            400,
            f"'dimensions' must be between 1 and {matrix.shape[1]} for model '{model}'",
            "unsupported_field",
        )
    return l2_normalize(matrix[:, :dimensions])


async def embeddings(request: Request) -> Response:
    """Dense embeddings in OpenAI's shape: ``float`` lists or ``base64`` little-endian float32."""
    engine = engine_of(request)
    try:
        body = msgspec.json.decode(await request.body(), type=OpenAIEmbeddingsRequest)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return _unprocessable(exc)
    try:
        texts = await _texts(engine, body)
        await engine.wait_loaded(body.model)
        outcome = await engine.encode(body.model, [Item(text=t) for t in texts], None)
        dense = [item.dense.values for item in outcome.items if item.dense is not None]
        matrix = _vectors(np.stack(dense), body.dimensions, body.model)
    except OpenAIError as exc:
        return exc.response()
    except EngineError as exc:  # the engine's one error table, in OpenAI's envelope
        rule = rule_for(exc)
        if rule is None:
            raise
        return OpenAIError(rule.openai.status, str(exc), rule.openai.code, rule.openai.type).response()
    usage = OpenAIUsage(prompt_tokens=outcome.tokens, total_tokens=outcome.tokens)
    content = await render_off_loop_if_big(matrix.size, _render, matrix, body, usage)
    return Response(content, media_type=codec.JSON, headers={"X-SIE-Served-By": "local"})


ROUTES = (
    PostRoute(
        "/v1/embeddings",
        embeddings,
        ("openai",),
        OpenAIEmbeddingsRequest,
        OpenAIEmbeddingsResponse,
        json_only=True,
    ),
)


def _render(matrix: np.ndarray, body: OpenAIEmbeddingsRequest, usage: OpenAIUsage) -> bytes:
    """The JSON body; building float lists is the costly part, so big ones run off the event loop."""
    if body.encoding_format is EncodingFormat.BASE64:
        data = [
            OpenAIEmbedding(base64.b64encode(row.astype("<f4").tobytes()).decode("ascii"), i)
            for i, row in enumerate(matrix)
        ]
    else:
        data = [OpenAIEmbedding(row.tolist(), i) for i, row in enumerate(matrix)]
    return codec.encode_json(OpenAIEmbeddingsResponse(data=data, model=body.model, usage=usage))
