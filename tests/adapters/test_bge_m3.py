"""BGE-M3 against FlagEmbedding's ``BGEM3FlagModel`` (the model's reference code) on the same weights:
a tiny XLM-RoBERTa built from a config, with seeded ``sparse_linear.pt`` and ``colbert_linear.pt``
heads and the packaged BERT tokenizer (its [SEP] declared as eos, so both sides drop the same ids)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from FlagEmbedding import BGEM3FlagModel

from sie.adapters.bge_m3 import BgeM3Encoder
from sie.adapters.contract import Forward, LoadSpec
from sie.core.options import Capability, ComputePrecision
from sie.core.task import UnsupportedInput
from sie.postprocess.quantize import l2_normalize
from tests import builders

ALL = frozenset({Capability.DENSE, Capability.SPARSE, Capability.MULTIVECTOR})
TEXTS = [
    "what causes high blood pressure",
    "Hypertension is often caused by stress, too much salt and genetics.",
    "ok",
    " ".join(["blood pressure and heart disease"] * 20),
]


@pytest.fixture(scope="module")
def m3_dir(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.bge_m3(splade_dir, tmp_path_factory.mktemp("bge-m3"))


@pytest.fixture(scope="module")
def reference(m3_dir: Path) -> dict:
    model = BGEM3FlagModel(str(m3_dir), use_fp16=False, devices="cpu")
    return model.encode(
        TEXTS, return_dense=True, return_sparse=True, return_colbert_vecs=True, max_length=512
    )


@pytest.fixture(scope="module")
def encoder(m3_dir: Path) -> BgeM3Encoder:
    return BgeM3Encoder.load(LoadSpec(m3_dir, "cpu", ComputePrecision.FLOAT32, 512))


def test_all_three_outputs_equal_flagembedding(encoder: BgeM3Encoder, reference: dict) -> None:
    assert encoder.packs_tokens  # XLM-RoBERTa runs the packed forward
    out = encoder.run(encoder.prepare(TEXTS, Forward(ALL)), Forward(ALL))
    assert out.dense is not None and out.sparse is not None and out.multivector is not None
    np.testing.assert_allclose(l2_normalize(out.dense), reference["dense_vecs"], atol=1e-5)
    for ours, theirs in zip(out.sparse, reference["lexical_weights"], strict=True):
        assert ours.indices.tolist() == sorted(int(k) for k in theirs)
        np.testing.assert_allclose(ours.values, [theirs[str(i)] for i in ours.indices], atol=1e-5)
    assert sum(len(v.indices) for v in out.sparse) > 10  # not vacuously empty
    for ours, theirs in zip(out.multivector, reference["colbert_vecs"], strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_any_subset_from_the_same_forward(encoder: BgeM3Encoder) -> None:
    batch = encoder.prepare(TEXTS, Forward(ALL))
    everything = encoder.run(batch, Forward(ALL))
    sparse_only = encoder.run(batch, Forward(frozenset({Capability.SPARSE})))
    assert sparse_only.dense is None and sparse_only.multivector is None
    assert sparse_only.sparse is not None and everything.sparse is not None
    for a, b in zip(sparse_only.sparse, everything.sparse, strict=True):
        np.testing.assert_array_equal(a.indices, b.indices)
    assert encoder.dims == {Capability.DENSE: 64, Capability.SPARSE: 30522, Capability.MULTIVECTOR: 64}


def test_pairs_are_refused(encoder: BgeM3Encoder) -> None:
    with pytest.raises(UnsupportedInput):
        encoder.prepare([("q", "d")], Forward(ALL))
