"""The enums of how a model runs and what a request asks for, shared by the wire structs, the engine
and the adapters (the public spellings are their values)."""

from __future__ import annotations

from enum import StrEnum


class ComputePrecision(StrEnum):
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"


class AttentionBackend(StrEnum):
    """``SIE_ATTENTION_BACKEND``: the attention kernels a model may use (see sie.adapters.runtime.attention)."""

    AUTO = "auto"
    FLASH_ATTENTION_2 = "flash_attention_2"
    SDPA = "sdpa"
    EAGER = "eager"


class Pooling(StrEnum):
    MEAN = "mean"
    CLS = "cls"
    LAST = "last"

    @classmethod
    def parse(cls, name: str) -> Pooling:
        """Accepts the public spellings (``last_token`` is ``last``); the error lists the valid ones."""
        normalized = "last" if name == "last_token" else name
        try:
            return cls(normalized)
        except ValueError:
            allowed = ", ".join(p.value for p in cls)
            raise ValueError(f"Unknown pooling '{name}'. Allowed: {allowed}, last_token") from None


class OutputType(StrEnum):
    DENSE = "dense"
    SPARSE = "sparse"
    MULTIVECTOR = "multivector"


class OutputDType(StrEnum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    INT8 = "int8"
    UINT8 = "uint8"
    BINARY = "binary"
    UBINARY = "ubinary"


class Capability(StrEnum):
    """What an adapter can produce from one forward: the encode output types, ``score`` and
    ``extract``. An adapter declares a set of these, so a request is refused before any work."""

    DENSE = "dense"
    SPARSE = "sparse"
    MULTIVECTOR = "multivector"
    SCORE = "score"
    EXTRACT = "extract"


class Modality(StrEnum):
    """What an item carries that an adapter can take (the public ``inputs`` of a model)."""

    TEXT = "text"
    IMAGE = "image"


class OverflowPolicy(StrEnum):
    """``options.overflow_policy``, every model's: what to do with an input past the model's window.
    ``default`` is what the model does on its own (the text families truncate), ``truncate_text``
    truncates, ``error`` refuses the input (400 ``INPUT_TOO_LONG``; an extraction fails that item)."""

    DEFAULT = "default"
    TRUNCATE_TEXT = "truncate_text"
    ERROR = "error"
