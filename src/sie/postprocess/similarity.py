"""Query-to-document similarity of embeddings, for scoring with an embedding model (``score_mode``)."""

from __future__ import annotations

import numpy as np

from sie.adapters.batch import SparseVector


def cosine(query: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """``documents`` is ``[n, dims]``; returns ``[n]`` cosines."""
    q = query.astype(np.float32) / max(float(np.linalg.norm(query)), 1e-12)
    d = documents.astype(np.float32)
    scores: np.ndarray = (d @ q) / np.clip(np.linalg.norm(d, axis=1), 1e-12, None)
    return scores


def sparse_dot(query: SparseVector, documents: list[SparseVector]) -> np.ndarray:
    """Sum of query weight times document weight over the token ids both hold."""
    weights = dict(zip(query.indices.tolist(), query.values.astype(np.float32).tolist(), strict=True))
    scores = np.zeros(len(documents), dtype=np.float32)
    for row, doc in enumerate(documents):
        scores[row] = sum(
            weights.get(i, 0.0) * w for i, w in zip(doc.indices.tolist(), doc.values.tolist(), strict=True)
        )
    return scores


def maxsim(query: np.ndarray, documents: list[np.ndarray]) -> np.ndarray:
    """Late interaction: each query token's best match in the document, averaged over query tokens
    (so scores of different queries share a scale, as the public server's BGE-M3 colbert score)."""
    q = query.astype(np.float32)
    scores = np.zeros(len(documents), dtype=np.float32)
    for row, doc in enumerate(documents):
        if len(doc) and len(q):
            scores[row] = float((q @ doc.astype(np.float32).T).max(axis=1).mean())
    return scores
