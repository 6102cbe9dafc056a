"""LoRA per forward: each batch runs with its own adapter, equal to PEFT's merged model, and the base
model stays the base model, on the packed BERT forward (which copies weights) and the padded one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from peft import PeftModel
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

from sie.adapters.contract import Forward, LoadSpec, TakesLora
from sie.adapters.dense_torch import TorchDenseEncoder
from sie.adapters.splade import SpladeEncoder
from sie.core.options import Capability, ComputePrecision
from tests import builders

TEXTS = ["a short query", "LoRA adapters change a few projections of every layer of the encoder.", "ok"]
DENSE = frozenset({Capability.DENSE})


@pytest.fixture(scope="module")
def loras(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("loras")
    return {
        "qv": builders.lora(minilm_dir, root / "qv", 1, ["query", "value"]),
        "all": builders.lora(minilm_dir, root / "all", 2, ["query", "key", "value", "dense"]),
    }


def merged_mean(minilm_dir: Path, lora: Path | None, texts: list[str]) -> np.ndarray:
    """The reference: PEFT's merged model (or the base), mean-pooled over real tokens."""
    model = AutoModel.from_pretrained(str(minilm_dir)).eval()
    if lora is not None:
        model = PeftModel.from_pretrained(model, str(lora)).merge_and_unload()
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_dir))
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return ((hidden * mask).sum(1) / mask.sum(1)).numpy()


def run(encoder: TorchDenseEncoder, texts: list[str], lora: str | None) -> np.ndarray:
    forward = Forward(DENSE, lora=lora)
    out = encoder.run(encoder.prepare(texts, forward), forward).dense
    assert out is not None
    return out


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_each_batch_runs_its_own_lora_and_the_base_stays_the_base(
    minilm_dir: Path, loras: dict[str, Path], packed: bool
) -> None:
    encoder = TorchDenseEncoder.load(
        LoadSpec(minilm_dir, "cpu", ComputePrecision.FLOAT32, 256, loadtime={"packed": packed})
    )
    assert isinstance(encoder, TakesLora)
    assert (encoder.backbone.packed is not None) is packed
    base_before = run(encoder, TEXTS, None)
    for name, folder in loras.items():
        encoder.load_lora(name, folder)
    # Interleaved, as batches of different requests arrive.
    for name in ["qv", None, "all", "qv", None]:
        expected = merged_mean(minilm_dir, loras[name] if name else None, TEXTS)
        np.testing.assert_allclose(run(encoder, TEXTS, name), expected, atol=2e-5)
    assert not np.allclose(run(encoder, TEXTS, "qv"), base_before, atol=1e-3)  # the LoRA does something
    np.testing.assert_allclose(run(encoder, TEXTS, None), base_before, atol=1e-6)
    encoder.unload_lora("qv")
    with pytest.raises((KeyError, ValueError)):
        run(encoder, TEXTS, "qv")
    np.testing.assert_allclose(
        run(encoder, TEXTS, "all"), merged_mean(minilm_dir, loras["all"], TEXTS), atol=2e-5
    )
    np.testing.assert_allclose(run(encoder, TEXTS, None), base_before, atol=1e-6)


def test_a_lora_reaches_the_heads_run_as_modules(splade_dir: Path, tmp_path: Path) -> None:
    """SPLADE's MLM head is called as a module after the packed encoder: a LoRA on it must apply."""
    folder = builders.lora(
        splade_dir, tmp_path / "mlm", 3, ["query", "value", "transform.dense"], AutoModelForMaskedLM
    )
    encoder = SpladeEncoder.load(LoadSpec(splade_dir, "cpu", ComputePrecision.FLOAT32, 256))
    encoder.load_lora("mlm", folder)
    reference = PeftModel.from_pretrained(AutoModelForMaskedLM.from_pretrained(str(splade_dir)), str(folder))
    reference = reference.merge_and_unload().eval()
    tokenizer = AutoTokenizer.from_pretrained(str(splade_dir))
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.inference_mode():
        logits = reference(**batch).logits
    weights = torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1)
    expected = weights.amax(dim=1).numpy()
    forward = Forward(frozenset({Capability.SPARSE}), lora="mlm")
    vectors = encoder.run(encoder.prepare(TEXTS, forward), forward).sparse
    assert vectors is not None
    for row, vector in zip(expected, vectors, strict=True):
        dense_row = np.zeros_like(row)
        dense_row[vector.indices] = vector.values
        np.testing.assert_allclose(dense_row, row, atol=1e-4)


def test_a_lora_that_does_not_fit_the_model_is_refused(minilm_dir: Path, tmp_path: Path) -> None:
    encoder = TorchDenseEncoder.load(LoadSpec(minilm_dir, "cpu", ComputePrecision.FLOAT32, 256))
    with pytest.raises(ValueError, match="no PEFT adapter"):
        encoder.load_lora("missing", tmp_path)
    before = run(encoder, TEXTS, None)
    np.testing.assert_allclose(run(encoder, TEXTS, None), before, atol=1e-6)
