"""MUVERA: one fixed-size dense vector per multivector, so late-interaction output fits a plain vector index.

A ColBERT-style model gives every item a bag of token vectors scored by Chamfer (MaxSim) similarity, which
single-vector indexes cannot search. MUVERA (Dhulipala et al., 2024, arXiv:2405.19504) maps each bag to a
"fixed dimensional encoding" (FDE) whose inner product approximates that similarity: random hyperplanes
cut token space into buckets, each bucket keeps the sum (query) or mean (document) of its tokens, and the
buckets of several independent cuts are concatenated, then optionally hashed down by a Count Sketch.

Vectors are meant to be stored next to ones the public SIE produced, so its choices are followed exactly:
NumPy's ``default_rng`` with seed ``seed + r`` for repetition ``r`` (hyperplanes drawn as a ``normal``
``[token_dim, k]`` matrix; a ``projection_dim`` sketch drawn from a fresh generator with that same seed);
sign bits read as a Gray code whose rank is the bucket; empty document buckets stay zero; the Count Sketch
drawn from ``default_rng(seed)``; the optional L2 normalisation comes last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from sie.core.options import Capability

_MAX_SIMHASH_PROJECTIONS = 16
# The public default needs 327,680 intermediate values; about 50x that still fits, far beyond it a mistyped
# config would only find out by exhausting memory (the Count Sketch keeps a bucket and sign per value).
_MAX_INTERMEDIATE_DIMS = 1 << 24
_SIGNS = np.array([-1.0, 1.0], dtype=np.float32)


def _require_int(name: str, value: object, low: int, high: int | None = None) -> None:
    """Bools are ints to Python but never a sensible count, so they are refused too."""
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and low <= value
        and (high is None or value <= high)
    ):
        return
    bound = f">= {low}" if high is None else f"in {low}..{high}"
    raise ValueError(f"muvera_config.{name} must be an integer {bound}, got {value!r}")


@dataclass(frozen=True)
class MuveraConfig:
    """The public SIE's knobs and defaults (the paper's setting: 40 x 64 buckets of full tokens, sketched to 10240)."""

    num_repetitions: int = 40
    num_simhash_projections: int = 6
    projection_dim: int | None = None
    final_projection_dim: int | None = 10240
    seed: int = 42
    normalize: bool = False

    def __post_init__(self) -> None:
        _require_int("num_repetitions", self.num_repetitions, 1)
        _require_int("num_simhash_projections", self.num_simhash_projections, 0, _MAX_SIMHASH_PROJECTIONS)
        if self.projection_dim is not None:
            _require_int("projection_dim", self.projection_dim, 1)
        if self.final_projection_dim is not None:
            _require_int("final_projection_dim", self.final_projection_dim, 1)
        _require_int("seed", self.seed, 0)  # default_rng refuses negative seeds
        if not isinstance(self.normalize, bool):
            raise ValueError(f"muvera_config.normalize must be true or false, got {self.normalize!r}")

    @property
    def num_partitions(self) -> int:
        return 1 << self.num_simhash_projections

    @classmethod
    def from_options(cls, raw: Mapping[str, object] | None) -> MuveraConfig:
        """Build from a model YAML's loadtime ``muvera_config``; a typo there must fail the load, not be ignored."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ValueError(f"muvera_config must be a mapping, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(key) for key in raw if key not in known)
        if unknown:
            raise ValueError(f"muvera_config has unknown key(s) {unknown}; allowed: {sorted(known)}")
        return cls(**raw)  # type: ignore[arg-type]  # value types are checked in __post_init__


def _simhash_planes(config: MuveraConfig, token_dim: int) -> np.ndarray:
    """``[R, token_dim, k]``: repetition r's hyperplanes come from ``default_rng(seed + r)``, as in the public SIE."""
    k = config.num_simhash_projections
    planes = [
        np.random.default_rng(config.seed + rep).normal(0.0, 1.0, size=(token_dim, k)).astype(np.float32)
        for rep in range(config.num_repetitions)
    ]
    return np.stack(planes)


def _sketch_projections(config: MuveraConfig, token_dim: int, projection_dim: int) -> np.ndarray:
    """``[R, token_dim, projection_dim]``: each input coordinate lands in one output column with a random sign.

    The public SIE draws these from a second generator seeded ``seed + r``, so they correlate with the
    hyperplanes of the same repetition; kept that way because matching its vectors is the point.
    """
    matrices = np.zeros((config.num_repetitions, token_dim, projection_dim), dtype=np.float32)
    rows = np.arange(token_dim)
    for rep in range(config.num_repetitions):
        rng = np.random.default_rng(config.seed + rep)
        columns = rng.integers(0, projection_dim, size=token_dim)
        matrices[rep, rows, columns] = rng.choice(_SIGNS, size=token_dim)
    return matrices


def _count_sketch(seed: int, input_dim: int, output_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Bucket and sign per intermediate coordinate, from ``default_rng(seed)`` (the public SIE's draw order)."""
    rng = np.random.default_rng(seed)
    buckets = rng.integers(0, output_dim, size=input_dim)
    signs = rng.choice(_SIGNS, size=input_dim)
    return buckets, signs


def gray_code_rank(bits: np.ndarray) -> np.ndarray:
    """Bucket index for sign bits on the last axis (first projection = most significant).

    The bits are read as a Gray code and the bucket is its rank, so buckets whose numbers are adjacent
    sit on opposite sides of exactly one hyperplane.
    """
    rank = np.zeros(bits.shape[:-1], dtype=np.int64)
    for position in range(bits.shape[-1]):
        rank = (rank << 1) | (bits[..., position].astype(np.int64) ^ (rank & 1))
    return rank


class Muvera:
    """Encoder for one model's token width; all random matrices are drawn once, here, from ``config.seed``."""

    def __init__(self, config: MuveraConfig, token_dim: int) -> None:
        if isinstance(token_dim, bool) or not isinstance(token_dim, int) or token_dim < 1:
            raise ValueError(f"token_dim must be an integer >= 1, got {token_dim!r}")
        self.config = config
        self.token_dim = token_dim
        self.projection_dim = config.projection_dim or token_dim
        self.intermediate_dims = config.num_repetitions * config.num_partitions * self.projection_dim
        if self.intermediate_dims > _MAX_INTERMEDIATE_DIMS:
            raise ValueError(
                f"muvera_config gives {self.intermediate_dims} intermediate values (num_repetitions x "
                f"2**num_simhash_projections x {self.projection_dim}); at most {_MAX_INTERMEDIATE_DIMS} are allowed"
            )
        self.dims: int = config.final_projection_dim or self.intermediate_dims

        self.simhash = _simhash_planes(config, token_dim)
        # One matmul for every repetition's hyperplanes: columns are (repetition, projection).
        self._simhash_flat = np.ascontiguousarray(self.simhash.transpose(1, 0, 2).reshape(token_dim, -1))
        self.projections: np.ndarray | None = None
        if config.projection_dim is not None:
            self.projections = _sketch_projections(config, token_dim, config.projection_dim)
        self.sketch_buckets: np.ndarray | None = None
        self.sketch_signs: np.ndarray | None = None
        if config.final_projection_dim is not None:
            self.sketch_buckets, self.sketch_signs = _count_sketch(
                config.seed, self.intermediate_dims, config.final_projection_dim
            )

    def encode(self, vectors: np.ndarray, *, is_query: bool) -> np.ndarray:
        """FDE of one ``[num_tokens, token_dim]`` multivector; no tokens gives the zero vector."""
        tokens = self._as_tokens(vectors)
        if tokens.shape[0] == 0:
            return np.zeros(self.dims, dtype=np.float32)
        fde = self._compress(self._bucket_vectors(tokens, is_query=is_query))
        if self.config.normalize:
            norm = np.linalg.norm(fde)
            if norm > 0:
                fde = fde / norm
        return fde.astype(np.float32, copy=False)

    def encode_batch(self, multivectors: Sequence[np.ndarray], *, is_query: bool) -> np.ndarray:
        """``[n, dims]``; items have different token counts, so they are encoded one by one."""
        out = np.zeros((len(multivectors), self.dims), dtype=np.float32)
        for row, vectors in enumerate(multivectors):
            out[row] = self.encode(vectors, is_query=is_query)
        return out

    def _as_tokens(self, vectors: np.ndarray) -> np.ndarray:
        tokens = np.asarray(vectors, dtype=np.float32)
        if tokens.ndim != 2 or tokens.shape[1] != self.token_dim:
            raise ValueError(
                f"expected a [num_tokens, {self.token_dim}] multivector, got shape {tokens.shape}"
            )
        return tokens

    def _bucket_vectors(self, tokens: np.ndarray, *, is_query: bool) -> np.ndarray:
        """Intermediate FDE: per repetition, per bucket, the sum (query) or mean (document) of its tokens.

        Sums keep every query token's weight, as Chamfer sums over query tokens; means make a document
        bucket stand for its typical token rather than its token count.
        """
        repetitions, partitions = self.config.num_repetitions, self.config.num_partitions
        sketches = (tokens @ self._simhash_flat).reshape(tokens.shape[0], repetitions, -1)
        bucket = gray_code_rank(sketches > 0)  # [tokens, R]
        membership = (bucket.T[:, None, :] == np.arange(partitions)[None, :, None]).astype(np.float32)
        # Identity keeps tokens [tokens, d] (broadcast over R); a sketch gives [R, tokens, p].
        projected = tokens if self.projections is None else tokens @ self.projections
        sums = membership @ projected  # [R, partitions, width]
        if not is_query:
            counts = membership.sum(axis=2, keepdims=True)
            sums = sums / np.maximum(counts, 1.0)  # an empty bucket stays zero, as in the public SIE
        flat: np.ndarray = sums.reshape(-1)
        return flat

    def _compress(self, fde: np.ndarray) -> np.ndarray:
        if self.sketch_buckets is None or self.sketch_signs is None:
            return fde
        sketched = np.bincount(self.sketch_buckets, weights=self.sketch_signs * fde, minlength=self.dims)
        return sketched.astype(np.float32)


@dataclass(frozen=True)
class MuveraStage:
    """MUVERA as one postprocess stage of a loaded model: it consumes the multivector output and
    produces a dense vector of ``dims``. A request asks for it with the ``muvera`` option (the public
    server's ``muvera`` profiles); the forward then computes the multivector in place of the dense
    output, and postprocessing turns one into the other."""

    CONSUMES: ClassVar = Capability.MULTIVECTOR
    PRODUCES: ClassVar = Capability.DENSE

    encoder: Muvera

    @classmethod
    def of(cls, token_dims: int, loadtime: Mapping[str, object]) -> MuveraStage:
        return cls(Muvera(MuveraConfig.from_options(loadtime.get("muvera_config")), token_dims))  # type: ignore[arg-type]

    @property
    def dims(self) -> int:
        return self.encoder.dims

    def computed(self, keep: frozenset[Capability]) -> frozenset[Capability]:
        """What the forward must compute for a response that carries ``keep``."""
        return keep - {self.PRODUCES} | {self.CONSUMES}

    def __call__(self, multivectors: Sequence[np.ndarray], is_query: bool) -> np.ndarray:
        return self.encoder.encode_batch(multivectors, is_query=is_query)
