"""The bfloat16 CPU path is only kept because it stays accurate: cosine >= 0.995 to float32 and the
same retrieval quality on a labelled set. These tests are that promise."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sie.adapters.contract import LoadSpec
from sie.adapters.dense_torch import TorchDenseEncoder
from sie.core.options import ComputePrecision, Pooling
from sie.postprocess.quantize import l2_normalize
from tests.conftest import dense


def labelled_set(vocab: list[str], seed: int = 3) -> tuple[list[str], list[str]]:
    """40 passages with one query each (a 12-word span of it), plus 300 distractor passages."""
    rng = random.Random(seed)
    passages = [" ".join(rng.choice(vocab) for _ in range(rng.randint(30, 80))) for _ in range(340)]
    queries = []
    for passage in passages[:40]:
        words = passage.split()
        start = rng.randrange(len(words) - 12)
        queries.append(" ".join(words[start : start + 12]))
    return queries, passages


@pytest.fixture(scope="module")
def setup(minilm_dir):
    vocab = [w for w in (minilm_dir / "vocab.txt").read_text().split() if w.isalpha() and len(w) >= 3]
    encoders = {
        p: TorchDenseEncoder.load(LoadSpec(minilm_dir, "cpu", p, 256))
        for p in (ComputePrecision.FLOAT32, ComputePrecision.BFLOAT16)
    }
    return vocab, encoders


def encode(encoder, texts: list[str]) -> np.ndarray:
    """Normalised vectors in batches of 32, tokenized by the adapter's own tokenizer."""
    out = [dense(encoder, texts[i : i + 32], Pooling.MEAN) for i in range(0, len(texts), 32)]
    return l2_normalize(np.concatenate(out))


def test_bf16_vectors_stay_within_cosine_0995(setup):
    vocab, encoders = setup
    _, passages = labelled_set(vocab)
    full = encode(encoders[ComputePrecision.FLOAT32], passages[:64])
    half = encode(encoders[ComputePrecision.BFLOAT16], passages[:64])
    assert (full * half).sum(axis=1).min() >= 0.995


def test_bf16_keeps_top10_retrieval(setup):
    vocab, encoders = setup
    queries, passages = labelled_set(vocab)
    recall = {}
    for precision, encoder in encoders.items():
        q, d = encode(encoder, queries), encode(encoder, passages)
        top10 = np.argsort(-(q @ d.T), axis=1)[:, :10]
        recall[precision] = np.mean([i in row for i, row in enumerate(top10)])
    assert recall[ComputePrecision.FLOAT32] >= 0.9  # the set is meaningful: float32 finds the passages
    assert recall[ComputePrecision.BFLOAT16] == recall[ComputePrecision.FLOAT32]
