"""Schemathesis hooks for ``test_schemathesis.py``, loaded by the CLI through ``SCHEMATHESIS_HOOKS``.

Three things the OpenAPI document cannot carry:

* msgpack request bodies are sent as the wire sends them: the same structure as JSON, with each
  ``data`` field raw bytes instead of base64 (``sie.wire.requests.Base64Bytes``), and integers held to
  the 64 bits msgpack can carry;
* msgpack responses (the native routes' default) are decoded, msgpack-numpy arrays into number lists,
  so their bodies are validated against the schema like JSON ones instead of being skipped;
* a model-capability refusal is not a schema mismatch. ``/v1/encode/{model}`` serves every model, and
  a schema-valid request can still ask one for what it lacks (an image-only item for a text model, an
  audio, video or document item (no family here reads one), a
  sparse output from a dense one, a score from an embedder, more ``dimensions`` than it has, an option
  its family and profile do not read, an
  ``input`` string that is no image data URI under ``modality: "image"``). The
  public contract answers those 400 ``INVALID_INPUT``; no schema of a multi-model route can foresee
  them. Exactly those refusals, recognised by their fixed messages, are not counted as "schema-valid
  request rejected"; every other check still runs on their responses, and any other 400 to
  schema-valid data still fails the run.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from typing import Any, Final

import msgpack
import numpy as np
import schemathesis

CAPABILITY_REFUSALS: Final = re.compile(
    "|".join(
        (
            r"adapters requires text input$",  # the model reads text; the item carries none
            r" carries (audio|video|document): this release reads text and images; ",
            r"^Model '.*' does not support output types: ",
            r"^Model '.*' does not support (scoring|extraction)\. ",
            r"^Model '.*' does not support reranking \(no score task\)\. ",
            r"^Score requires text on the query and on every item$",
            r"^Sparse output takes output_dtype float32 or float16, ",
            r"^Model '.*' declares (?P<task>score|extract), but no (?P=task) adapter is available",
            r"^Unknown profile '.*' for model '.*'\. Available: ",
            r"^'dimensions' must be between 1 and \d+ for model '.*'$",
            r"^Token id \d+ is outside the vocabulary of model '.*' \(size \d+\)$",
            r"^Model '.*' does not support image input; it takes text$",
            r"^Model '.*' takes one image per item, got \d+; ",
            # /v1/embeddings with modality "image": its input strings must be image data URIs, which
            # the schema's strings (shared with text inputs) cannot say.
            r"^input\[\d+\] (must be a base64 data URI|is a URL|holds invalid base64)",
            r"^With modality 'image', 'input' must be data URIs",
            # Which option names a model understands depends on its family and profile; the schema's
            # ``options`` is an open object on every model's route.
            r"^Unknown options? '.*' for model '.*'\. Allowed: ",
            r"^Model '.*' does not take output_schema: ",
            # The generation routes serve every model id; an embedder generates nothing.
            r"^Model '.*' does not support generation$",
        )
    ),
    re.DOTALL,
)


MEDIA_FIELDS: Final = ("audio", "video", "document")
INT_MIN, INT_MAX = -(2**63), 2**64 - 1


def _wire_item(item: Any) -> Any:
    """An item with its media ``data`` as raw bytes (left alone where it is not base64: that is a
    negative case and must stay one)."""
    if not isinstance(item, dict):
        return item
    media = [item.get(key) for key in MEDIA_FIELDS]
    images = item.get("images")
    media += images if isinstance(images, list) else []
    for one in media:
        if isinstance(one, dict) and isinstance(one.get("data"), str):
            with contextlib.suppress(ValueError):  # binascii.Error, or a non-ASCII string
                one["data"] = base64.b64decode(one["data"], validate=True)
    return item


def _clamped(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return min(max(value, INT_MIN), INT_MAX)
    if isinstance(value, dict):
        return {k: _clamped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clamped(v) for v in value]
    return value


@schemathesis.serializer("application/msgpack")
def msgpack_request(ctx: Any, value: Any) -> bytes:
    value = _clamped(value)  # a copy: the case keeps its body for the report
    if isinstance(value, dict):
        for key in ("items", "query"):
            if key in value:
                found = value[key]
                value[key] = [_wire_item(i) for i in found] if isinstance(found, list) else _wire_item(found)
    return msgpack.packb(value)


def _arrays(value: dict[Any, Any]) -> Any:
    if value.get(b"nd") is True:
        array = np.frombuffer(value[b"data"], dtype=np.dtype(value[b"type"]))
        return array.reshape(value[b"shape"]).tolist()
    return value


@schemathesis.deserializer("application/msgpack")
def msgpack_body(ctx: Any, response: Any) -> Any:
    return msgpack.unpackb(response.content, raw=False, object_hook=_arrays)


def _message(response: Any) -> str | None:
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    detail = (body.get("detail") or body.get("error")) if isinstance(body, dict) else None
    return detail.get("message") if isinstance(detail, dict) else None


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a 400 capability refusal reported as a rejected schema-valid request."""
    if failure.code != "ST202" or response.status_code != 400:
        return True
    message = _message(response)
    return message is None or CAPABILITY_REFUSALS.search(message) is None
