"""Property-based fuzzing (hypothesis) of the two decoders every byte from outside meets: the HTTP
request codec (a body from any client) and the work-item codec (a message from any NATS peer).

Whatever arrives — random bytes, well-formed JSON or msgpack of any shape, nesting far past any
limit, structures close to a real request — each decoder answers with a value or its own error
(``WireDecodeError``, ``TooManyItems``, ``ContractError``, ``WorkItemInvalid``), never another
exception: another one is a 500 at the edge, or a work item that is neither acked nor termed and
comes back twenty times. The example budget is bounded (``max_examples``) so the tier stays fast in
CI; ``HYPOTHESIS_PROFILE=long`` runs many more by hand.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sie.catalog.admission import Admission, RequestLimits, TooManyItems
from sie.catalog.catalog import Catalog
from sie.queue.codec import Envelope, WorkItemInvalid, request_of, work_items
from sie.queue.contract import ContractError, WorkItem, decode_work_item, decode_work_result, encode_message
from sie.settings.common import PACKAGED_MODELS_DIR
from sie.wire import codec
from sie.wire.requests import EncodeRequest, ExtractRequest, Item, ScoreRequest

settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=20_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ENVELOPE = Envelope("r", "m", "default", "default", "router", "_INBOX.router.r", 0.0, 1.0)
VALID = work_items(EncodeRequest(items=[Item(text="x")]), ENVELOPE)[0]
ADMISSION = Admission(Catalog.from_directory(PACKAGED_MODELS_DIR), RequestLimits(max_items=8))
CONTENT_TYPES = st.sampled_from(["application/json", "application/msgpack", None, "text/plain"])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=20),
)
# Any tree of maps and lists, keys drawn partly from the real field names so structures come near
# a valid request (and its nested items, options and params).
FIELD_NAMES = st.sampled_from(
    [
        "items",
        "params",
        "query",
        "text",
        "images",
        "id",
        "options",
        "output_types",
        "labels",
        "data",
        "format",
    ]
)
trees = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(st.one_of(FIELD_NAMES, st.text(max_size=8)), inner, max_size=6),
    ),
    max_leaves=40,
)


def deep(depth: int, as_list: bool, content_type: str | None) -> bytes:
    """``{"items": ...}`` nested ``depth`` deep, written byte by byte: an encoder would refuse to
    build it, a peer does not ask one."""
    if content_type == "application/msgpack":
        head = b"\x91" if as_list else b"\x81\xa5items"
        return b"\x81\xa5items" + head * depth + b"\xa1x"
    opening, closing = (b"[", b"]") if as_list else (b'{"items":', b"}")
    return b'{"items":' + opening * depth + b'"x"' + closing * depth + b"}"


def _pack(value: Any, content_type: str | None) -> bytes | None:
    try:
        if content_type == "application/msgpack":
            return msgspec.msgpack.encode(value)
        return msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return None  # not representable in that format (a NaN in JSON, bytes as JSON keys, ...)


def _decodes_or_refuses(body: bytes, content_type: str | None) -> None:
    try:
        ADMISSION.count(body, content_type)
    except TooManyItems:
        return
    for into in (EncodeRequest, ScoreRequest, ExtractRequest):
        with contextlib.suppress(codec.WireDecodeError):
            codec.decode(body, content_type, into)


@given(st.binary(max_size=2048), CONTENT_TYPES)
def test_request_codec_on_random_bytes(body: bytes, content_type: str | None) -> None:
    _decodes_or_refuses(body, content_type)


@given(trees, CONTENT_TYPES)
def test_request_codec_on_any_structure(value: Any, content_type: str | None) -> None:
    body = _pack(value, content_type)
    if body is not None:
        _decodes_or_refuses(body, content_type)


@given(st.integers(min_value=1, max_value=20_000), st.booleans(), CONTENT_TYPES)
def test_request_codec_on_deep_nesting(depth: int, as_list: bool, content_type: str | None) -> None:
    _decodes_or_refuses(deep(depth, as_list, content_type), content_type)


def _work_item_or_refusal(data: bytes) -> None:
    try:
        work = decode_work_item(data)
    except ContractError:
        return
    with contextlib.suppress(WorkItemInvalid):
        request_of(work)


@given(st.binary(max_size=2048))
def test_work_item_codec_on_random_bytes(data: bytes) -> None:
    _work_item_or_refusal(data)
    with contextlib.suppress(ContractError):
        decode_work_result(data)


@given(trees)
def test_work_item_codec_on_any_structure(value: Any) -> None:
    data = _pack(value, "application/msgpack")
    if data is not None:
        _work_item_or_refusal(data)


@given(st.integers(min_value=1, max_value=20_000), st.booleans())
def test_work_item_codec_on_deep_nesting(depth: int, as_list: bool) -> None:
    """L5: a deeply nested work item is a ContractError (termed), not a RecursionError (redelivered):
    nested alone, and as the options of an otherwise real item."""
    nested = deep(depth, as_list, "application/msgpack")
    options = msgspec.Raw(nested[len(b"\x81\xa5items") :])
    for data in (nested, msgspec.msgpack.encode({**msgspec.to_builtins(VALID), "options": options})):
        _work_item_or_refusal(data)
        with contextlib.suppress(ContractError):
            decode_work_result(data)


@given(st.dictionaries(st.sampled_from([f for f in WorkItem.__struct_fields__]), trees, max_size=8))
def test_work_items_with_real_field_names(fields: dict[str, Any]) -> None:
    data = _pack(fields, "application/msgpack")
    if data is not None:
        _work_item_or_refusal(data)


def test_the_fuzz_reaches_valid_messages() -> None:
    """The decoders accept what they should: a real work item survives the round trip (so a fuzz
    that only ever produces refusals would be noticed here, not mistaken for safety)."""
    assert decode_work_item(encode_message(VALID)) == VALID
    assert isinstance(request_of(VALID), EncodeRequest)
