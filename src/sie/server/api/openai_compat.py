"""``POST /v1/embeddings``, the OpenAI embeddings API, so the ``openai`` client works unchanged.

Beyond the public SIE: token-id inputs are accepted (decoded with the model's tokenizer), usage counts
real tokens, and ``dimensions`` truncates and re-normalises (Matryoshka-style) instead of being refused.
The body is decoded as leniently as the public route's pydantic model (``"dimensions": 1.0`` is an int,
``"encoding_format": null`` means ``float``).

With ``modality: "image"`` (Infinity's field for multimodal models) ``input`` holds base64 data URIs
of images (``data_uri``), embedded by the same engine encode as ``/v1/encode``'s ``images`` items; a
model that takes no images refuses them with 400 there, as it would on ``/v1/encode``.

Every error uses OpenAI's ``{"error": {...}}`` envelope from the engine's error table, a body that is
not JSON or does not fit the schema included (400 ``invalid_request``). The public server answers
that one with FastAPI's 422 ``{"detail": [...]}`` list, which no OpenAI client parses and which its
own OpenAPI document calls a known residual; here the route's errors have one shape.
"""

from __future__ import annotations

import base64

import numpy as np
from fastapi import Request, Response

from sie.engine.engine import Engine
from sie.http.errors import openai_error, openai_error_response
from sie.http.routes import PostRoute
from sie.postprocess.quantize import l2_normalize
from sie.server.api.data_uri import BadImageInput, image_from_data_uri
from sie.server.api.native import engine_of, render_off_loop_if_big
from sie.server.remote import REMOTE_PARAM, remote_header, router_of
from sie.wire import codec
from sie.wire.requests import EmbeddingModality, EncodeRequest, EncodingFormat, Item, OpenAIEmbeddingsRequest
from sie.wire.responses import OpenAIEmbedding, OpenAIEmbeddingsResponse, OpenAIUsage


class OpenAIError(Exception):
    """A refusal this route makes itself, with a code the engine's table does not know."""

    def __init__(
        self, status: int, message: str, code: str, error_type: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.error_type = status, code, error_type

    def response(self) -> Response:
        return openai_error(self.status, str(self), self.code, self.error_type)


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


async def _items(engine: Engine, request: OpenAIEmbeddingsRequest) -> list[Item]:
    """The request's inputs as encode items: images for ``modality: "image"``, else texts."""
    if request.modality is not EmbeddingModality.IMAGE:
        return [Item(text=text) for text in await _texts(engine, request)]
    raw = [request.input] if isinstance(request.input, str) else request.input
    if not raw:
        raise OpenAIError(400, "Input cannot be empty", "invalid_request")
    if not all(isinstance(one, str) for one in raw):
        raise OpenAIError(
            400, "With modality 'image', 'input' must be data URIs (strings)", "invalid_request"
        )
    try:
        return [Item(images=[image_from_data_uri(str(one), f"input[{i}]")]) for i, one in enumerate(raw)]
    except BadImageInput as exc:
        raise OpenAIError(400, str(exc), "invalid_request") from None


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
        raw = await request.body()
        engine.admission.count(raw, codec.JSON, "input", objects=False)
        body = codec.decode(raw, codec.JSON, OpenAIEmbeddingsRequest, strict=False)
        items = await _items(engine, body)
        engine.admission.sizes(items, "input")  # named as this route names them
        routed = await router_of(request).encode(
            body.model, EncodeRequest(items=items), remote_header(request), wait_loaded=True
        )
        answer = routed.answer
        dense = [item.dense.values for item in answer.response.items if item.dense is not None]
        matrix = _vectors(np.stack(dense), body.dimensions, body.model)
    except OpenAIError as exc:
        return exc.response()
    except Exception as exc:  # the engine's one error table (a bad body included), in OpenAI's envelope
        return openai_error_response(exc)
    usage = OpenAIUsage(prompt_tokens=answer.tokens, total_tokens=answer.tokens)
    content = await render_off_loop_if_big(matrix.size, _render, matrix, body, usage)
    return Response(content, media_type=codec.JSON, headers=dict(routed.headers))


ROUTES = (
    PostRoute(
        "/v1/embeddings",
        embeddings,
        ("openai",),
        OpenAIEmbeddingsRequest,
        OpenAIEmbeddingsResponse,
        json_only=True,
        openai_errors=True,
        headers=(REMOTE_PARAM,),
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
