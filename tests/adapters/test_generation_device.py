"""Generation on the accelerator (``SIE_TEST_DEVICE``, default ``cuda``; skipped without one), run by
``scripts/gpu-kit``'s session beside the families' CUDA tests: both engines held to transformers'
greedy ``generate`` on the same device in float32 (continuous batching on Qwen3, alone and in a busy
batch; ``generate`` in padded batches on Qwen3.5's hybrid and Gemma 4). ``SIE_TEST_DEVICE=cpu``
runs the same checks on the CPU."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

from sie.adapters.contract import LoadSpec
from sie.adapters.generation.causal_lm import CausalLmGenerator
from sie.adapters.generation.sampling import Sampling
from sie.core.options import ComputePrecision
from tests import builders
from tests.adapters.test_generation import PROMPTS, _reference, _tokens

DEVICE = os.environ.get("SIE_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEVICE.startswith("cuda") and not torch.cuda.is_available(), reason="needs a CUDA GPU"
)
NEW_TOKENS = 16

# Each: its builder, the class transformers loads it with for the reference, whether the paged cache cannot hold it.
CASES: dict[str, tuple[Callable[[Path], Path], type, bool]] = {
    "Qwen3": (lambda folder: builders.generative(folder, "Qwen3"), AutoModelForCausalLM, False),
    "Qwen3_5Text": (lambda folder: builders.generative(folder, "Qwen3_5Text"), AutoModelForCausalLM, True),
    "Gemma4": (builders.gemma4, AutoModelForImageTextToText, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_generation_on_the_device_equals_generate_there(name: str, tmp_path: Path) -> None:
    build, auto, unpaged = CASES[name]
    folder = build(tmp_path / name)
    spec = LoadSpec(weights=folder, device=DEVICE, precision=ComputePrecision.FLOAT32, max_seq_length=1024)
    generator = CausalLmGenerator.load(spec)
    try:
        assert (generator.unpaged_because is not None) == unpaged
        want = _reference(folder, PROMPTS, NEW_TOKENS, auto, DEVICE)

        async def run() -> tuple[list[int], list[list[int]]]:
            alone = await _tokens(generator, PROMPTS[0], NEW_TOKENS, Sampling())
            busy = await asyncio.gather(*(_tokens(generator, p, NEW_TOKENS, Sampling()) for p in PROMPTS))
            return alone.tokens, [b.tokens for b in busy]

        alone, busy = asyncio.run(run())
        assert alone == want[0]
        assert busy == want
    finally:
        generator.close()
