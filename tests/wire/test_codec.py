import msgspec
import numpy as np
import pytest

from sie.core.options import OutputDType
from sie.wire import codec
from sie.wire.requests import EncodeRequest
from sie.wire.responses import (
    ContentTokens,
    DenseVector,
    EncodeResponse,
    EncodeResult,
    ScoreUsage,
    Timing,
    Usage,
)


@pytest.mark.parametrize(
    ("accept", "json"),
    [
        (None, False),
        ("*/*", False),
        ("application/json", True),
        ("application/msgpack", False),
        ("application/json, application/msgpack", False),
        ("application/x-msgpack", False),
    ],
)
def test_negotiation(accept, json):
    assert codec.wants_json(accept) is json


def test_sdk_minimal_body_decodes():
    body = bytes.fromhex("81a56974656d739181a474657874a568656c6c6f")
    request = codec.decode(body, "application/msgpack", EncodeRequest)
    assert request.items[0].text == "hello" and request.params is None


def test_non_msgpack_content_type_is_parsed_as_json():
    request = codec.decode(b'{"items":[{"text":"a"}],"bogus":1}', "text/plain", EncodeRequest)
    assert request.items[0].text == "a"


@pytest.mark.parametrize(
    ("body", "ctype", "message"),
    [
        (b"\xc1", "application/msgpack", "MessagePack data is malformed: invalid opcode"),
        (b"\x81", "application/msgpack", "Input data was truncated"),
        (b"{1:2}", "application/json", "JSON is malformed: object keys must be strings (byte 1)"),
        (b"{}", "application/json", "Object missing required field `items`"),
        (b'{"items":[{"text":1}]}', None, "Expected `str | null`, got `int` - at `$.items[0].text`"),
        (b'{"items":[],"params":{"output_dtype":"float64"}}', None, "Invalid enum value 'float64'"),
        (b'{"items":[{"text":"\xff"}]}', None, "UTF-8"),
        (bytes.fromhex("81a56974656d739181a474657874a2fffe"), "application/msgpack", "UTF-8"),
    ],
)
def test_decode_errors_carry_public_messages(body, ctype, message):
    with pytest.raises(codec.WireDecodeError) as info:
        codec.decode(body, ctype, EncodeRequest)
    assert message.lower() in str(info.value).lower()


def _response() -> EncodeResponse:
    vector = np.arange(4, dtype=np.float32)
    return EncodeResponse(
        model="m",
        items=[EncodeResult(dense=DenseVector(4, "float32", vector)), EncodeResult(id="b")],
        timing=Timing(1.0, 0.5, 0.1, 0.3, None),
    )


def test_json_response_shape_and_key_order():
    decoded = msgspec.json.decode(codec.encode(_response(), as_json=True))
    assert list(decoded) == ["model", "items", "timing"]
    assert decoded["items"][0] == {"dense": {"dims": 4, "dtype": "float32", "values": [0.0, 1.0, 2.0, 3.0]}}
    assert decoded["items"][1] == {"id": "b"}
    assert decoded["timing"]["postprocessing_ms"] is None


def test_usage_comes_last_and_names_only_what_was_counted():
    text_only = msgspec.structs.replace(_response(), usage=Usage(7))
    decoded = msgspec.json.decode(codec.encode(text_only, as_json=True))
    assert list(decoded) == ["model", "items", "timing", "usage"] and decoded["usage"] == {"input_tokens": 7}
    pictures = msgspec.structs.replace(_response(), usage=Usage(0, images=2))
    assert msgspec.msgpack.decode(codec.encode(pictures, as_json=False))["usage"] == {
        "input_tokens": 0,
        "images": 2,
    }
    score = ScoreUsage(30, None, ContentTokens(21))
    assert msgspec.json.decode(codec.encode(score, as_json=True)) == {
        "input_tokens": 30,
        "input_tokens_details": {"content_tokens": 21},
    }


def test_msgpack_response_starts_like_the_public_server():
    packed = codec.encode(_response(), as_json=False)
    assert packed.startswith(bytes.fromhex("83a56d6f64656ca16da56974656d739281a564656e736583a464696d7304"))


def test_output_dtype_enum_covers_public_values():
    assert {d.value for d in OutputDType} == {"float32", "float16", "int8", "uint8", "binary", "ubinary"}
