"""Typed request bodies. msgspec validates them, so its messages (``Object missing required field
`items```) reach the client verbatim, as the public server's do. Unknown fields are ignored.

Some rules are checked after decoding, with the public server's own messages (``Field 'items' must
not be empty``); ``Meta(extra_json_schema=...)`` states them in the JSON Schema only, so
``/openapi.json`` promises no more than the routes accept while the decoder's messages stay the public
ones. ``JSON_SCHEMA_FIELDS`` does the same where msgspec cannot generate the schema at all.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final

import msgspec

from sie.core.options import OutputDType, OutputType

Base64Bytes = Annotated[
    bytes,
    msgspec.Meta(
        extra_json_schema={
            "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
            "description": "raw bytes in msgpack; padded standard base64 in JSON",
        }
    ),
]
"""Bytes, which JSON carries as the padded standard base64 msgspec decodes (``contentEncoding`` alone
would let a client send any string)."""


class ImageInput(msgspec.Struct):
    data: Base64Bytes
    format: str | None = None


class MediaInput(msgspec.Struct):
    data: Base64Bytes
    format: str | None = None
    sample_rate: int | None = None


class Item(msgspec.Struct, omit_defaults=True):
    id: str | None = None
    text: str | None = None
    images: list[ImageInput] | None = None
    audio: MediaInput | None = None
    video: MediaInput | None = None
    document: MediaInput | None = None
    metadata: dict[str, Any] | None = None


class EncodeParams(msgspec.Struct, omit_defaults=True):
    output_types: list[OutputType] | None = None
    output_dtype: OutputDType | None = None
    instruction: str | None = None
    options: dict[str, Any] | None = None


NonEmptyItems = Annotated[
    list[Item],
    msgspec.Meta(
        extra_json_schema={"minItems": 1},
        examples=[[{"text": "Hello, world!"}, {"id": "q2", "text": "How are you?"}]],
    ),
]
"""Every operation refuses an empty ``items`` (``require_items``, after decoding). The example, the
public document's, is what "Try it out" (and a fuzzer's example phase) sends first."""


class EncodeRequest(msgspec.Struct):
    items: NonEmptyItems
    params: EncodeParams | None = None


class ScoreRequest(msgspec.Struct):
    query: Item
    items: NonEmptyItems
    instruction: str | None = None
    options: dict[str, Any] | None = None


class ExtractParams(msgspec.Struct, omit_defaults=True):
    labels: list[str] | None = None
    output_schema: dict[str, Any] | None = None
    instruction: str | None = None
    options: dict[str, Any] | None = None


class ExtractRequest(msgspec.Struct):
    items: NonEmptyItems
    params: ExtractParams | None = None


class EncodingFormat(StrEnum):
    FLOAT = "float"
    BASE64 = "base64"


_TOKEN_IDS: Final = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}


class EmbeddingModality(StrEnum):
    """Infinity's extension of the OpenAI body: what ``input`` holds (``image``: data URIs)."""

    TEXT = "text"
    IMAGE = "image"


class OpenAIEmbeddingsRequest(msgspec.Struct):
    """``POST /v1/embeddings``: ``input`` is a string, strings, token ids, or lists of token ids; with
    ``modality: "image"`` (Infinity's field) a ``data:image/...;base64,`` URI or a list of them.

    msgspec allows one list type per union, so the element union is checked for homogeneity later
    (an empty or mixed list is refused there); ``JSON_SCHEMA_FIELDS`` documents what is accepted.
    Token ids must also lie inside the model's vocabulary and ``dimensions`` within its width, which
    no schema of a multi-model route can state.
    """

    JSON_SCHEMA_FIELDS: ClassVar[dict[str, dict[str, Any]]] = {
        "input": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "minItems": 1, "items": {"type": "string"}},
                _TOKEN_IDS,
                {"type": "array", "minItems": 1, "items": _TOKEN_IDS},
            ]
        }
    }

    model: str
    input: str | list[str | int | list[int]]
    encoding_format: EncodingFormat | None = EncodingFormat.FLOAT  # null means float, as in public SIE
    dimensions: Annotated[int | None, msgspec.Meta(extra_json_schema={"minimum": 1})] = None
    user: str | None = None
    modality: EmbeddingModality | None = None  # null means text


class RerankDocumentInput(msgspec.Struct):
    text: str


class RerankRequest(msgspec.Struct):
    """``POST /v1/rerank`` as Cohere, Jina and Infinity clients send it; documents are strings or
    ``{"text": ...}`` objects."""

    model: str
    query: str
    documents: Annotated[list[str | RerankDocumentInput], msgspec.Meta(extra_json_schema={"minItems": 1})]
    top_n: Annotated[int | None, msgspec.Meta(extra_json_schema={"minimum": 1})] = None
    return_documents: bool = False
