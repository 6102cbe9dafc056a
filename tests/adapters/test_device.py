import pytest

from sie.adapters.runtime.device import detect_device, effective_precision
from sie.core.options import ComputePrecision as P


@pytest.mark.parametrize(
    ("requested", "bf16_hardware", "runs"),
    [
        (P.FLOAT32, True, P.FLOAT32),
        (P.BFLOAT16, True, P.BFLOAT16),
        (P.FLOAT16, True, P.BFLOAT16),
        (P.BFLOAT16, False, P.FLOAT32),
        (P.FLOAT16, False, P.FLOAT32),
    ],
)
def test_cpu_policy(requested, bf16_hardware, runs):
    assert effective_precision(requested, "cpu", cpu_bf16=bf16_hardware) is runs


def test_other_devices_keep_the_request_and_explicit_devices_pass_through():
    assert effective_precision(P.FLOAT16, "mps") is P.FLOAT16
    assert detect_device("cuda:1") == "cuda:1"
    assert detect_device("auto") in {"cpu", "cuda", "mps"}
