"""The correctness gate: a server's vectors against float32 sentence-transformers.

1. Cosine: every vector of the fixed 64-text corpus sample must reach the threshold (0.995; 0.99 for
   an int8 model) against the float32 reference.
2. Retrieval: the labelled set from ``corpus.retrieval_set`` (40 queries, 440 passages). The server's
   recall@10 must equal the reference's; how many queries' top-10 lists differ is reported, not gated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.clients import Sender
from bench.corpus import Corpus
from bench.raw import Reference, normalised

TOP_K = 10
CHUNK = 32


@dataclass
class GateResult:
    server: str
    client: str
    threshold: float
    min_cosine: float
    below_threshold: int
    recall_at_10: float
    reference_recall_at_10: float
    top10_lists_differ: int  # queries whose ordered top-10 differs from the reference's
    top10_sets_differ: int  # ... whose top-10 membership differs
    queries: int
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def top_k(queries: np.ndarray, passages: np.ndarray, k: int = TOP_K) -> np.ndarray:
    scores = queries @ passages.T
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def recall_at_k(top: np.ndarray) -> float:
    """Query i's relevant passage is passage i."""
    return float(np.mean([i in row for i, row in enumerate(top)]))


async def _vectors(sender: Sender, texts: list[str]) -> np.ndarray:
    parts = [await sender.vectors(texts[i : i + CHUNK]) for i in range(0, len(texts), CHUNK)]
    return normalised(np.concatenate(parts))


async def check(
    server: str, sender: Sender, corpus: Corpus, reference: Reference, threshold: float
) -> GateResult:
    sample = await _vectors(sender, [corpus.texts[i] for i in corpus.check_sample])
    cosines = np.sum(sample * reference.sample, axis=1)
    queries = await _vectors(sender, corpus.retrieval.queries)
    passages = await _vectors(sender, corpus.retrieval.passages)
    top = top_k(queries, passages)
    ref_top = top_k(reference.retrieval_queries, reference.retrieval_passages)
    result = GateResult(
        server=server,
        client=sender.label,
        threshold=threshold,
        min_cosine=float(cosines.min()),
        below_threshold=int(np.sum(cosines < threshold)),
        recall_at_10=recall_at_k(top),
        reference_recall_at_10=recall_at_k(ref_top),
        top10_lists_differ=int(np.sum(np.any(top != ref_top, axis=1))),
        top10_sets_differ=sum(set(a) != set(b) for a, b in zip(top, ref_top, strict=True)),
        queries=len(top),
    )
    if result.below_threshold:
        result.failures.append(
            f"{server}/{sender.label}: {result.below_threshold} of {len(cosines)} sample vectors below "
            f"cosine {threshold} (min {result.min_cosine:.5f})"
        )
    if result.recall_at_10 != result.reference_recall_at_10:
        result.failures.append(
            f"{server}/{sender.label}: recall@10 {result.recall_at_10:.3f} != float32 reference "
            f"{result.reference_recall_at_10:.3f}"
        )
    return result
