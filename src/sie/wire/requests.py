"""Typed request bodies. msgspec validates them, so its messages (``Object missing required field
`items```) reach the client verbatim, as the public server's do. Unknown fields are ignored."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec

from sie.core.options import OutputDType, OutputType


class ImageInput(msgspec.Struct):
    data: bytes
    format: str | None = None


class MediaInput(msgspec.Struct):
    data: bytes
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


class EncodeRequest(msgspec.Struct):
    items: list[Item]
    params: EncodeParams | None = None


class ScoreRequest(msgspec.Struct):
    query: Item
    items: list[Item]
    instruction: str | None = None
    options: dict[str, Any] | None = None


class ExtractParams(msgspec.Struct, omit_defaults=True):
    labels: list[str] | None = None
    output_schema: dict[str, Any] | None = None
    instruction: str | None = None
    options: dict[str, Any] | None = None


class ExtractRequest(msgspec.Struct):
    items: list[Item]
    params: ExtractParams | None = None


class EncodingFormat(StrEnum):
    FLOAT = "float"
    BASE64 = "base64"


class OpenAIEmbeddingsRequest(msgspec.Struct):
    """``POST /v1/embeddings``: ``input`` is a string, strings, token ids, or lists of token ids.

    msgspec allows one list type per union, so the element union is checked for homogeneity later.
    """

    model: str
    input: str | list[str | int | list[int]]
    encoding_format: EncodingFormat | None = EncodingFormat.FLOAT  # null means float, as in public SIE
    dimensions: int | None = None
    user: str | None = None
