import numpy as np

from sie.core.options import OutputDType
from sie.postprocess.quantize import l2_normalize, quantize, wire_dtype_name

ROWS = np.array([[0.5, -1.0, 0.25, 0.0], [2.0, 2.0, 2.0, 2.0]], dtype=np.float32)


def test_int8_is_symmetric_per_row():
    out = quantize(ROWS, OutputDType.INT8)
    assert out.dtype == np.int8
    assert out[0].tolist() == [64, -127, 32, 0]
    assert out[1].tolist() == [127, 127, 127, 127]


def test_uint8_is_min_max_per_row_and_constant_rows_map_to_128():
    out = quantize(ROWS, OutputDType.UINT8)
    assert out.dtype == np.uint8
    assert out[0].tolist() == [255, 0, 212, 170]
    assert out[1].tolist() == [128, 128, 128, 128]


def test_binary_packs_sign_bits_and_ubinary_is_identical():
    vectors = np.array([[1, -1, 1, -1, 0, 1, 1, 1, 1]], dtype=np.float32)
    out = quantize(vectors, OutputDType.BINARY)
    assert out.dtype == np.uint8 and out.shape == (1, 2)
    assert out[0].tolist() == [0b10100111, 0b10000000]
    np.testing.assert_array_equal(quantize(vectors, OutputDType.UBINARY), out)
    assert wire_dtype_name(OutputDType.UBINARY) == "binary"


def test_float16_and_normalize():
    assert quantize(ROWS, OutputDType.FLOAT16).dtype == np.float16
    norms = np.linalg.norm(l2_normalize(ROWS), axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-6)
