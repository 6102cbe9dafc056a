"""The cluster's codec both ways: every field of every wire request, each set to a value of its own, comes
back from ``request_of(work_items(request))`` (one item at a time: each work item stands for the
request with that item alone). The requests are built from the structs' own field lists, so a field
added to a wire request and not carried by the codec fails here, with no server or queue running."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from sie.queue.codec import Envelope, WorkItemInvalid, request_of, work_items
from sie.queue.contract import WorkItem, decode_work_item, encode_message
from sie.wire.requests import EncodeRequest, ExtractRequest, Item, ScoreRequest

ENVELOPE = Envelope(
    request_id="r1",
    model_id="org/model",
    pool_name="default",
    machine_profile="l4",
    router_id="gw",
    reply_subject="_INBOX.gw.r1",
    timestamp=1000.0,
    deadline=1030.0,
    traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
)


def filled(info: msgspec.inspect.Type, name: str) -> Any:
    """A value of ``info`` that no default equals, and that names the field it was made for."""
    if isinstance(info, msgspec.inspect.Metadata):
        return filled(info.type, name)
    if isinstance(info, msgspec.inspect.UnionType):
        return filled(next(t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)), name)
    if isinstance(info, msgspec.inspect.StrType):
        return f"value of {name}"
    if isinstance(info, msgspec.inspect.BoolType):
        return True
    if isinstance(info, msgspec.inspect.IntType):
        return 7
    if isinstance(info, msgspec.inspect.BytesType):
        return name.encode()
    if isinstance(info, msgspec.inspect.EnumType):
        return list(info.cls)[-1]
    if isinstance(info, msgspec.inspect.ListType):
        return [filled(info.item_type, name)]
    if isinstance(info, msgspec.inspect.DictType):
        return {f"key of {name}": [1, {"nested": True}]}
    if isinstance(info, msgspec.inspect.AnyType):
        return {f"any of {name}": 1}
    if isinstance(info, msgspec.inspect.StructType):
        return info.cls(**{f.name: filled(f.type, f"{name}.{f.name}") for f in info.fields})
    raise AssertionError(f"no value for {info!r} ({name}): teach this test the new type")


def every_field(cls: type) -> Any:
    """``cls`` with every field set; ``items`` holds two items, to see each reach its own work item."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    values = {f.name: filled(f.type, f.name) for f in info.fields}
    if "items" in values:
        values["items"] = [filled(msgspec.inspect.type_info(Item), f"item {i}") for i in range(2)]
    return cls(**values)


def over_the_wire(items: list[WorkItem]) -> list[WorkItem]:
    return [decode_work_item(encode_message(item)) for item in items]


def test_an_encode_request_comes_back_one_item_at_a_time() -> None:
    request = every_field(EncodeRequest)
    assert request.params is not None and request.params.output_dtype is not None
    items = over_the_wire(work_items(request, ENVELOPE))
    assert [w.item_index for w in items] == [0, 1] and {w.total_items for w in items} == {2}
    for index, work in enumerate(items):
        assert request_of(work) == msgspec.structs.replace(request, items=[request.items[index]])


def test_an_extract_request_comes_back_one_item_at_a_time() -> None:
    request = every_field(ExtractRequest)
    items = over_the_wire(work_items(request, ENVELOPE))
    assert len(items) == 2
    for index, work in enumerate(items):
        assert request_of(work) == msgspec.structs.replace(request, items=[request.items[index]])


def test_a_score_request_travels_whole_in_one_item() -> None:
    request = every_field(ScoreRequest)
    (work,) = over_the_wire(work_items(request, ENVELOPE))
    assert (work.item_index, work.total_items) == (0, 1)
    assert request_of(work) == request


def test_the_envelope_reaches_every_item() -> None:
    for work in work_items(every_field(EncodeRequest), ENVELOPE):
        assert work.work_item_id == f"r1.{work.item_index}"
        assert (work.request_id, work.model_id, work.pool_name, work.machine_profile) == (
            "r1",
            "org/model",
            "default",
            "l4",
        )
        assert (work.reply_subject, work.deadline, work.traceparent) == (
            "_INBOX.gw.r1",
            1030.0,
            ENVELOPE.traceparent,
        )
        assert work.operation == "encode" and work.router_id == "gw" and work.profile_id == "default"


def test_the_requests_own_output_dtype_wins_over_the_option_of_that_name() -> None:
    request = msgspec.convert(
        {"items": [{"text": "a"}], "params": {"output_dtype": "int8", "options": {"output_dtype": "binary"}}},
        EncodeRequest,
    )
    (work,) = work_items(request, ENVELOPE)
    again = request_of(work)
    assert isinstance(again, EncodeRequest) and again.params is not None
    assert again.params.output_dtype == "int8" and not again.params.options


def test_what_a_public_gateway_sends_is_read_too() -> None:
    """``is_query`` beside the options, and output types it forwards unread."""
    (work,) = work_items(EncodeRequest([Item(text="q")]), ENVELOPE)
    public = msgspec.structs.replace(work, is_query=True, output_types=["dense"])
    request = request_of(public)
    assert isinstance(request, EncodeRequest) and request.params is not None
    assert request.params.options == {"is_query": True} and request.params.output_types == ["dense"]
    with pytest.raises(WorkItemInvalid, match="Unknown output types: \\['densest'\\]"):
        request_of(msgspec.structs.replace(work, output_types=["densest"]))
