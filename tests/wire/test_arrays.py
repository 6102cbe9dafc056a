import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sie.wire.arrays import ArrayDecodeError, numpy_default, object_hook, wire_to_array

DTYPES = ["<f4", "<f2", "<f8", "|i1", "|u1", "<i4", "<i8"]


def test_layout_matches_public_bytes():
    """Bin keys in the public order; `type` a str, `kind` an empty bin (captured from the public server)."""
    packed = msgpack.packb(np.zeros(384, dtype="<f4"), default=numpy_default, use_bin_type=True)
    assert packed.startswith(
        bytes.fromhex("85c4026e64c3c40474797065a33c6634c4046b696e64c400c405736861706591cd0180")
    )
    raw = msgpack.unpackb(packed, raw=False)
    assert list(raw) == [b"nd", b"type", b"kind", b"shape", b"data"]
    assert raw[b"type"] == "<f4" and raw[b"kind"] == b"" and raw[b"shape"] == [384]
    assert len(raw[b"data"]) == 1536


@given(hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(max_dims=3, max_side=5)))
def test_roundtrip(array):
    packed = msgpack.packb({"v": array}, default=numpy_default, use_bin_type=True)
    back = msgpack.unpackb(packed, raw=False, object_hook=object_hook)["v"]
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_non_contiguous_input_is_packed_in_c_order():
    array = np.arange(12, dtype="<f4").reshape(3, 4).T
    packed = msgpack.packb(array, default=numpy_default, use_bin_type=True)
    np.testing.assert_array_equal(msgpack.unpackb(packed, raw=False, object_hook=object_hook), array)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({b"nd": True, b"type": "|O", b"kind": b"", b"shape": [1], b"data": b"x"}, "not numeric"),
        (
            {b"nd": True, b"type": "<f4", b"kind": b"O", b"shape": [1], b"data": b"xxxx"},
            "object and structured",
        ),
        ({b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [2], b"data": b"xxxx"}, "does not match"),
        ({b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [-1], b"data": b""}, "non-negative"),
        ({b"nd": True, b"type": "nope", b"kind": b"", b"shape": [1], b"data": b""}, "dtype"),
    ],
)
def test_refuses_unsafe_or_inconsistent_arrays(value, message):
    with pytest.raises(ArrayDecodeError, match=message):
        wire_to_array(value)


def test_plain_maps_pass_through():
    assert object_hook({"a": 1}) == {"a": 1}
