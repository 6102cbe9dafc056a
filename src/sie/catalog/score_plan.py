"""What one score request asks of the model: pairs through a cross-encoder, or similarity of
embeddings (``options.score_mode``), resolved from the model's declared tasks before any loading.

A model that declares ``score`` and no encode outputs is a cross-encoder and scores pairs. A model with
encode outputs scores by similarity: ``dense`` (cosine), ``sparse`` (dot product over shared token
ids), ``maxsim`` / ``colbert`` (late interaction, averaged over query tokens) or ``hybrid`` (a weighted
sum of those the model has, weights from ``score_weights``, default dense 0.4, sparse 0.2, colbert
0.4). The public server offers these modes for BGE-M3 only (its default: dense); here every
embedding model takes them when asked, and a model that declares ``score`` defaults to dense.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from sie.catalog.errors import InvalidInput
from sie.core.options import Capability


class ScoreMode(StrEnum):
    DENSE = "dense"
    SPARSE = "sparse"
    MAXSIM = "maxsim"
    HYBRID = "hybrid"


# Which output each similarity reads, and its name in ``score_weights``.
SIMILARITY_OUTPUT: Final = {
    ScoreMode.DENSE: (Capability.DENSE, "dense"),
    ScoreMode.SPARSE: (Capability.SPARSE, "sparse"),
    ScoreMode.MAXSIM: (Capability.MULTIVECTOR, "colbert"),
}
DEFAULT_WEIGHTS: Final = {"dense": 0.4, "sparse": 0.2, "colbert": 0.4}
SCORING_HINT: Final = (
    "does not support scoring. Use an encoder model with /v1/encode instead, or use a reranker model."
)


@dataclass(frozen=True)
class ScorePlan:
    # None: the model scores (query, document) pairs itself. Otherwise similarity over these outputs,
    # each with its weight (one output with weight 1 unless hybrid).
    weights: dict[Capability, float] | None

    @property
    def pairs(self) -> bool:
        return self.weights is None


def _mode(raw: object) -> ScoreMode:
    name = "maxsim" if raw == "colbert" else raw
    try:
        return ScoreMode(str(name))
    except ValueError:
        allowed = ", ".join([*(m.value for m in ScoreMode), "colbert"])
        raise InvalidInput(f"Unknown score_mode '{raw}'. Allowed: {allowed}") from None


def _weights(raw: object) -> dict[str, float]:
    if raw is None:
        return dict(DEFAULT_WEIGHTS)
    if not isinstance(raw, dict) or any(k not in DEFAULT_WEIGHTS for k in raw):
        raise InvalidInput(f"Option 'score_weights' must map some of {sorted(DEFAULT_WEIGHTS)} to numbers")
    weights = {**dict.fromkeys(DEFAULT_WEIGHTS, 0.0), **raw}
    if any(not isinstance(w, int | float) or isinstance(w, bool) or w < 0 for w in weights.values()):
        raise InvalidInput("Option 'score_weights' values must be non-negative numbers")
    return {k: float(v) for k, v in weights.items()}


def plan_score(
    model: str, declares_score: bool, outputs: frozenset[Capability], options: dict[str, Any]
) -> ScorePlan:
    """``outputs`` are the model's declared encode output types."""
    raw_mode = options.get("score_mode")
    if raw_mode is None:
        if not declares_score:
            raise InvalidInput(f"Model '{model}' {SCORING_HINT}")
        if not outputs:
            return ScorePlan(None)
        # A model that declares scoring and encodes scores by its own kind of vector: a ColBERT by
        # late interaction, as the public server's ColBERT adapters do.
        raw_mode = next(
            (
                m
                for m in (ScoreMode.DENSE, ScoreMode.MAXSIM, ScoreMode.SPARSE)
                if SIMILARITY_OUTPUT[m][0] in outputs
            ),
            ScoreMode.DENSE,
        )
    mode = _mode(raw_mode)
    if mode is ScoreMode.HYBRID:
        weights = _weights(options.get("score_weights"))
        chosen = {
            cap: weights[name]
            for cap, name in SIMILARITY_OUTPUT.values()
            if cap in outputs and weights[name] > 0
        }
        if not chosen:
            raise InvalidInput(f"score_mode 'hybrid' has no positive weight for an output of model '{model}'")
        return ScorePlan(chosen)
    capability, _ = SIMILARITY_OUTPUT[mode]
    if capability not in outputs:
        raise InvalidInput(
            f"score_mode '{mode.value}' needs the {capability.value} output, which model '{model}' "
            f"does not have. Its outputs: {sorted(c.value for c in outputs) or 'none'}"
        )
    return ScorePlan({capability: 1.0})
