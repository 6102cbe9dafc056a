"""Body decoding and encoding with content negotiation, shared by every front end.

Requests are msgpack when ``Content-Type`` names msgpack and JSON otherwise (as the public server does,
so ``text/plain`` with a JSON body works). Responses are msgpack unless ``Accept`` asks for JSON.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Final, TypeVar

import msgspec
import numpy as np

from sie.wire.arrays import numpy_default

T = TypeVar("T")

MSGPACK: Final = "application/msgpack"
JSON: Final = "application/json"
_MSGPACK_TYPES: Final = ("application/msgpack", "application/x-msgpack")


class WireDecodeError(ValueError):
    """The body could not be decoded into the expected struct; the message is safe to show the client."""


def is_msgpack(content_type: str | None) -> bool:
    return content_type is not None and any(t in content_type.lower() for t in _MSGPACK_TYPES)


def wants_json(accept: str | None) -> bool:
    """JSON only when asked for and msgpack is not: no header and ``*/*`` both mean msgpack."""
    if not accept:
        return False
    accept = accept.lower()
    return JSON in accept and not any(t in accept for t in _MSGPACK_TYPES)


def _json_default(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot encode {type(value).__name__} to JSON")


_MSGPACK_ENCODER: Final = msgspec.msgpack.Encoder(enc_hook=numpy_default)
_JSON_ENCODER: Final = msgspec.json.Encoder(enc_hook=_json_default)


def decode(body: bytes, content_type: str | None, into: type[T], *, strict: bool = True) -> T:
    """``strict=False`` is pydantic's lax mode in msgspec's words (``1.0`` and ``"1"`` for an int), for
    a route whose public counterpart validates with pydantic; the native routes are strict msgspec."""
    try:
        if is_msgpack(content_type):
            return msgspec.msgpack.decode(body, type=into, strict=strict)
        return msgspec.json.decode(body, type=into, strict=strict)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WireDecodeError(str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise WireDecodeError(f"Invalid UTF-8 in request body: {exc.reason} (byte {exc.start})") from exc
    except RecursionError as exc:
        raise WireDecodeError("Request body is nested too deeply") from exc


class _Element(msgspec.Struct, gc=False):
    """An array element the count reads past: an object whose fields are skipped unread."""


_LONGER_THAN: Final = "Expected `array` of length <= "


@cache
def _counted(field: str, limit: int, objects: bool) -> type[msgspec.Struct]:
    element: Any = _Element if objects else msgspec.Raw
    bounded = Annotated[list[element], msgspec.Meta(max_length=limit)]
    return msgspec.defstruct("Counted", [(field, bounded, msgspec.field(default_factory=list))])


def longer_than(
    body: bytes, content_type: str | None, field: str, limit: int, *, objects: bool = True
) -> bool:
    """Whether the body's top-level array ``field`` holds more than ``limit`` elements, read without
    decoding them: msgpack states an array's length up front (refused in microseconds, whatever the
    body), JSON is scanned once with each element skipped. A body that does not parse says False:
    the full decode tells the caller what is wrong with it."""
    if len(body) <= 2 * limit:
        return False  # too short to hold ``limit`` + 1 elements of an array
    try:
        decode(body, content_type, _counted(field, limit, objects))
    except WireDecodeError as exc:
        return str(exc).startswith(_LONGER_THAN) and str(exc).endswith(f"`$.{field}`")
    return False


def encode(value: Any, *, as_json: bool) -> bytes:
    return _JSON_ENCODER.encode(value) if as_json else _MSGPACK_ENCODER.encode(value)


def encode_json(value: Any) -> bytes:
    return _JSON_ENCODER.encode(value)


def media_type(*, as_json: bool) -> str:
    return JSON if as_json else MSGPACK
