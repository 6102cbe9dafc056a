"""NumPy arrays in msgpack-numpy's map layout, which the public SDK insists on.

The public SDK recognises an array only by the *bin* key ``b"nd"`` and rejects non-empty ``kind``
(object/structured dtypes would let a peer run pickle), so we emit exactly
``{b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [...], b"data": <raw C-order bytes>}`` and
decode only plain numeric dtypes.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

MAX_DIMENSIONS: Final = 8
_NUMERIC_KINDS: Final = frozenset("biuf")


class ArrayDecodeError(ValueError):
    """A msgpack-numpy map that is malformed or names a dtype we refuse to build."""


def array_to_wire(array: np.ndarray) -> dict[bytes, Any]:
    """The msgpack-numpy map for ``array``; ``data`` is a view, so no copy is made for C-order input."""
    contiguous = np.ascontiguousarray(array)
    return {
        b"nd": True,
        b"type": contiguous.dtype.str,
        b"kind": b"",
        b"shape": list(contiguous.shape),
        b"data": contiguous.data.cast("B"),
    }


def scalar_to_wire(value: np.generic) -> dict[bytes, Any]:
    return {b"nd": False, b"type": value.dtype.str, b"kind": b"", b"data": value.tobytes()}


def numpy_default(value: object) -> object:
    """``default``/``enc_hook`` for msgpack encoders: NumPy arrays and scalars to their wire maps."""
    if isinstance(value, np.ndarray):
        return array_to_wire(value)
    if isinstance(value, np.generic):
        return scalar_to_wire(value)
    raise TypeError(f"cannot encode {type(value).__name__} to msgpack")


def _numeric_dtype(name: object) -> np.dtype[Any]:
    if isinstance(name, bytes):
        name = name.decode("ascii", "replace")
    if not isinstance(name, str):
        raise ArrayDecodeError("array 'type' must be a dtype string")
    try:
        dtype = np.dtype(name)
    except TypeError as exc:
        raise ArrayDecodeError(f"unknown array dtype {name!r}") from exc
    if dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None:
        raise ArrayDecodeError(f"array dtype {name!r} is not numeric")
    return dtype


def wire_to_array(value: dict[Any, Any]) -> np.ndarray | np.generic:
    """Rebuild an array (or scalar) from its msgpack-numpy map, refusing anything but numeric data."""
    if value.get(b"kind", b"") not in (b"", ""):
        raise ArrayDecodeError("object and structured arrays are not accepted")
    dtype = _numeric_dtype(value.get(b"type"))
    data = value.get(b"data")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ArrayDecodeError("array 'data' must be bytes")
    if value.get(b"nd") is not True:
        scalar: np.generic = np.frombuffer(data, dtype=dtype, count=1)[0]
        return scalar
    shape = value.get(b"shape")
    if not isinstance(shape, list | tuple) or len(shape) > MAX_DIMENSIONS:
        raise ArrayDecodeError("array 'shape' must be a list of at most 8 dimensions")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ArrayDecodeError("array 'shape' entries must be non-negative integers")
    count = int(np.prod(shape, dtype=np.int64))
    if count * dtype.itemsize != len(data):
        raise ArrayDecodeError("array 'data' length does not match its shape and dtype")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def object_hook(value: dict[Any, Any]) -> object:
    """``object_hook`` for ``msgpack.unpackb(..., raw=False)``: maps keyed by bin ``nd`` become arrays."""
    if b"nd" in value:
        return wire_to_array(value)
    return value
