"""The contract between the engine and a model family.

An adapter does two things, on two threads. ``prepare`` turns inputs (texts, query-document pairs or
images) into ``Prepared`` items on the CPU pool: tokenization or image decoding, plus whatever the
family adds (ColBERT's markers and query expansion, a pair's segments, an NLI model's hypotheses). ``run`` takes a batch of prepared items on the device thread and
returns every output the ``Forward`` asks for, as NumPy, in one ``BatchOutputs``. One forward may
yield several outputs (BGE-M3 gives dense, sparse and multivector from one pass). What an adapter can
produce is declared up front (``capabilities``), so the engine refuses a request before any work.
Both halves are told the ``Forward`` the items will take: whether they are queries, the extraction
task (labels and the family's options) and the LoRA to run with. Output dtypes, normalisation and
MUVERA are the engine's postprocessing, never the adapter's. An adapter never sees a request, HTTP or
the queue.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeGuard, runtime_checkable

import numpy as np

from sie.core.extraction import Extraction
from sie.core.options import AttentionBackend, Capability, ComputePrecision, Modality, Pooling

if TYPE_CHECKING:  # the gateway imports this module (a request's checks) and has no tokenizers
    from sie.adapters.tokenizer import TextTokenizer


@dataclass(frozen=True, slots=True)
class ImageData:
    """An image as the client sent it (JPEG, PNG, ...): decoded by ``prepare``, on the CPU pool.
    ``text`` is the item's text beside it, for a family that reads both (``reads_image_text``): a
    chat VLM embeds an image and its caption as one input; every other family gets the image alone."""

    data: bytes
    format: str | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class AnnotatedText:
    """A text with its item's ``metadata``, for the families that read what a client says about the
    text (``reads_item_metadata``): GLiREL scores relations between the entities named there."""

    text: str
    metadata: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class MediaPair:
    """A (query, document) pair for a pair scorer that reads images (Qwen3-VL's reranker): each side
    is its item's text or its image (with the item's text beside it); text-only scorers keep getting
    plain ``(str, str)`` tuples."""

    query: str | ImageData
    document: str | ImageData


# What ``prepare`` takes: a text, a (query, document) pair for models that score pairs (a
# ``MediaPair`` for one that reads images), an image, or a text with its item's metadata.
ModelInput = str | tuple[str, str] | ImageData | AnnotatedText | MediaPair

_NO_IDS = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Prepared:
    """One item ready for the device: token ids (a pair's two segments joined) and, for pairs, the
    segment of each token. ``payload`` holds what else the family's ``run`` needs (an image's pixels,
    GLiNER's words, an NLI model's hypothesis pairs), opaque to the engine. Its cost for batching is
    ``weight`` when the family sets one, else its token count."""

    ids: np.ndarray = field(default_factory=lambda: _NO_IDS)
    type_ids: np.ndarray | None = None
    payload: Any = None
    weight: int | None = None

    @property
    def cost(self) -> int:
        return self.weight if self.weight is not None else len(self.ids)


@dataclass(frozen=True)
class TokenBatch:
    """Right-padded ids for the adapters whose forward takes a padded batch (``lengths``: real ones)."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray
    lengths: np.ndarray

    @classmethod
    def pad(cls, batch: Sequence[Prepared], pad_id: int) -> TokenBatch:
        lengths = np.fromiter((item.cost for item in batch), dtype=np.int64, count=len(batch))
        width = int(lengths.max(initial=0))
        ids = np.full((len(batch), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        types = np.zeros((len(batch), width), dtype=np.int64)
        for row, item in enumerate(batch):
            ids[row, : item.cost] = item.ids
            mask[row, : item.cost] = 1
            if item.type_ids is not None:
                types[row, : item.cost] = item.type_ids
        return cls(ids, mask, types, lengths)


@dataclass(frozen=True)
class Task:
    """An extraction request's parameters: its ``labels``, ``instruction``, runtime options (the
    profile's overlaid by the request's, as sorted pairs so a ``Task`` hashes) and ``output_schema``
    (for the families that read one), frozen by ``frozen``. Each family reads the options it knows
    (``threshold``, ``flat_ner``, ``hypothesis_template``...) with its own defaults."""

    labels: tuple[str, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    instruction: str | None = None
    output_schema: Any = None

    @classmethod
    def of(
        cls,
        labels: Sequence[str],
        options: Mapping[str, Any],
        instruction: str | None = None,
        output_schema: Mapping[str, Any] | None = None,
    ) -> Task:
        pairs = tuple(sorted((key, frozen(value)) for key, value in options.items()))
        return cls(
            tuple(labels), pairs, instruction, None if output_schema is None else frozen(output_schema)
        )

    def option(self, key: str, default: Any) -> Any:
        return next((value for name, value in self.options if name == key), default)


class FrozenMapping(tuple[tuple[Any, Any], ...]):
    """A mapping's (key, value) pairs in the client's order: a task's question order and a label
    group's order are what the model reads, so a mapping is not sorted (its keys need not even be
    comparable, as msgpack's may not be). It equals no plain tuple, so a list of pairs never batches
    with a mapping."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is FrozenMapping and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((FrozenMapping, tuple(self)))


# Levels of lists and mappings an option or output_schema may nest: far past any real one, and far
# below the interpreter's recursion limit (a client's 900 levels would otherwise be a 500).
MAX_NESTING: Final = 64


def frozen(value: Any, depth: int = 0) -> Any:
    """``value`` hashable: mappings as ``FrozenMapping``, lists as tuples (``thawed`` undoes it)."""
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_NESTING:
        raise UnsupportedInput(f"Request options and output_schema may nest at most {MAX_NESTING} levels")
    if isinstance(value, Mapping):
        return FrozenMapping((k, frozen(v, depth + 1)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(frozen(v, depth + 1) for v in value)
    return value


def thawed(value: Any) -> Any:
    """A frozen option as the client sent it: dicts and lists again."""
    if isinstance(value, FrozenMapping):
        return {k: thawed(v) for k, v in value}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value


def unit_option(task: Task | None, name: str, default: float, family: str) -> float:
    """A score threshold from the request: a finite number in [0, 1], not a bool; anything else (a
    string, an integer too large for a float) is the client's error, named with the family's words."""
    number = finite_number(task.option(name, default) if task else default)
    if not (math.isfinite(number) and 0 <= number <= 1):
        raise UnsupportedInput(f"{family} {name} must be a finite number between 0 and 1")
    return number


def integer_option(
    task: Task | None, name: str, default: int, family: str, low: int = 1, high: int | None = None
) -> int:
    """An integer option from the request or the profile, from ``low`` to ``high``; a bool, a float,
    a string or an integer outside the bounds is the client's error, named with the family's words."""
    value = task.option(name, default) if task else default
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        if high is not None:
            bounds = f"an integer from {low} to {high}"
        else:
            bounds = "a positive integer" if low == 1 else f"an integer of at least {low}"
        raise UnsupportedInput(f"{family} option '{name}' must be {bounds}, got {value!r}")
    return value


def loadtime_integer(loadtime: Mapping[str, Any], key: str, default: int) -> int:
    """A positive integer a profile's ``loadtime`` sets (``default`` when it sets none); anything else
    (a bool, a float, a string, zero) is the model's YAML's error, raised at load."""
    value = loadtime.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"loadtime {key} must be a positive integer, got {value!r}")
    return value


def eager_cuda_graphs(loadtime: Mapping[str, Any], family: str) -> str:
    """The public server's ``loadtime.cuda_graphs`` (``"off"`` or ``"bucketed"``; YAML reads an
    unquoted ``off`` as false), checked so its YAMLs load; the encoder runs eagerly here."""
    mode = loadtime.get("cuda_graphs", "off")
    mode = "off" if mode is False else mode
    if mode not in ("off", "bucketed"):
        raise ValueError(f"{family} cuda_graphs must be 'off' or 'bucketed', got {mode!r}")
    if mode != "off":
        logging.getLogger(__name__).info(
            "%s: cuda_graphs=%s is accepted; the encoder runs eagerly", family, mode
        )
    return str(mode)


def is_offset(value: Any) -> TypeGuard[int]:
    """Whether a client's character offset is an integer (a bool is not one, though Python says so)."""
    return isinstance(value, int) and not isinstance(value, bool)


def finite_number(value: Any) -> float:
    """A client's number as a float; NaN for anything else (a bool, a string, an integer too large for
    a float: 10**400 arrives as a JSON integer), which the caller refuses by ``math.isfinite``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):
            return float(value)
    return math.nan


@dataclass(frozen=True)
class Forward:
    """What one forward must produce and how; items are batched together only when this is equal, so a
    batch never mixes LoRAs, extraction labels or query and document preparation."""

    outputs: frozenset[Capability]
    pooling: Pooling | None = None  # dense pooling; None means the model's own
    is_query: bool = False
    task: Task | None = None  # extraction; a pair scorer's or an instruction-placing encoder's instruction
    lora: str | None = None  # a LoRA the adapter has loaded (``TakesLora``); None is the base model
    # The request's cap on a text's tokens (a ColBERT's ``query_max_length`` / ``max_seq_length``): an
    # adapter that reads it keeps to the smaller of it and its own length; None leaves its own.
    max_length: int | None = None


@dataclass(frozen=True, slots=True)
class SparseVector:
    indices: np.ndarray  # int32 token ids, ascending
    values: np.ndarray  # float32 weights, all > 0


@dataclass(frozen=True, slots=True)
class ItemOutputs:
    dense: np.ndarray | None = None
    sparse: SparseVector | None = None
    multivector: np.ndarray | None = None  # [tokens, token_dims]
    score: float | None = None
    extraction: Extraction | None = None


@dataclass
class BatchOutputs:
    """A batch's outputs, one row (or list entry) per item in batch order; float32 before postprocessing.

    Dense vectors and scores stay matrices so postprocessing runs once per batch, not per item."""

    dense: np.ndarray | None = None  # [items, dims]
    sparse: list[SparseVector] | None = None
    multivector: list[np.ndarray] | None = None
    scores: np.ndarray | None = None  # [items]
    extractions: list[Extraction] | None = None

    @classmethod
    def concat(cls, parts: Sequence[BatchOutputs]) -> BatchOutputs:
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        return cls(
            dense=np.concatenate([p.dense for p in parts if p.dense is not None])
            if first.dense is not None
            else None,
            sparse=[v for p in parts for v in p.sparse or ()] if first.sparse is not None else None,
            multivector=[m for p in parts for m in p.multivector or ()]
            if first.multivector is not None
            else None,
            scores=np.concatenate([p.scores for p in parts if p.scores is not None])
            if first.scores is not None
            else None,
            extractions=[e for p in parts for e in p.extractions or ()]
            if first.extractions is not None
            else None,
        )

    def take(self, rows: list[int]) -> BatchOutputs:
        """The outputs of ``rows`` only, in that order."""
        return BatchOutputs(
            dense=self.dense[rows] if self.dense is not None else None,
            sparse=[self.sparse[i] for i in rows] if self.sparse is not None else None,
            multivector=[self.multivector[i] for i in rows] if self.multivector is not None else None,
            scores=self.scores[rows] if self.scores is not None else None,
            extractions=[self.extractions[i] for i in rows] if self.extractions is not None else None,
        )

    def items(self, count: int) -> list[ItemOutputs]:
        return [
            ItemOutputs(
                dense=self.dense[i] if self.dense is not None else None,
                sparse=self.sparse[i] if self.sparse is not None else None,
                multivector=self.multivector[i] if self.multivector is not None else None,
                score=float(self.scores[i]) if self.scores is not None else None,
                extraction=self.extractions[i] if self.extractions is not None else None,
            )
            for i in range(count)
        ]


@dataclass(frozen=True)
class LoadSpec:
    """Everything an adapter needs to load, resolved by the engine from YAML, settings and device."""

    weights: Path
    device: str
    precision: ComputePrecision
    max_seq_length: int | None
    loadtime: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None
    tokenizer_weights: Path | None = None
    attention: AttentionBackend = AttentionBackend.AUTO
    # Another repository's weights a composite model loads (GLiNER union's members, a pruner's head),
    # resolved through the same tiers as the model's own: ``fetch(hf_id, revision, weights_path) ->
    # folder`` (or the file ``weights_path`` names); a None ``hf_id`` looks at ``weights_path`` alone.
    fetch: Callable[[str | None, str | None, str | None], Path] | None = None

    @property
    def tokenizer_folder(self) -> Path:
        """Where the tokenizer is: its own weights (a YAML's ``tokenizer_id``) or the model's."""
        return self.tokenizer_weights or self.weights

    def tokenizer(self) -> TextTokenizer:
        from sie.adapters.tokenizer import TextTokenizer

        return TextTokenizer.from_folder(self.tokenizer_folder, self.max_seq_length)


class Vocabulary(Protocol):
    """What the engine itself asks of a model's tokenizer: decoding token-id inputs (OpenAI clients).
    ``TextTokenizer`` is one; a family whose tokenizer has no ``tokenizer.json`` (SigLIP's
    sentencepiece) wraps its own."""

    @property
    def vocab_size(self) -> int: ...

    def decode(self, ids: list[int]) -> str: ...


class Adapter(Protocol):
    """A loaded model of one family; see the module docstring for the two halves of the contract."""

    capabilities: frozenset[Capability]
    inputs: frozenset[Modality]  # what an item may carry; the engine refuses the rest before any work
    family: str  # named in input errors ("SentenceTransformer adapters requires text input")
    # The request options the family reads itself (from ``Task``), beyond the engine's own; a request
    # naming any other option is refused (``engine.request_options``).
    request_options: frozenset[str]
    # Output sizes: dense dims, sparse vocabulary, multivector token dims.
    dims: Mapping[Capability, int]
    default_pooling: Pooling

    @property
    def tokenizer(self) -> Vocabulary: ...

    # True when padding costs the adapter (almost) nothing because it packs real tokens itself: the
    # engine then sends a whole batch in one call instead of cutting it into length chunks.
    packs_tokens: bool

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        """CPU pool: tokenize or decode; raises ``UnsupportedInput`` for an input the family cannot
        take (the engine answers 400 with its message)."""
        ...

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        """Device thread: one batch through the model, every output in ``forward.outputs``."""
        ...

    def close(self) -> None:
        """Free weights and device memory."""
        ...


@runtime_checkable
class TakesLora(Protocol):
    """An adapter that runs PEFT LoRA adapters per request (``Forward.lora``). Both methods run on the
    device thread, between batches; the engine decides what is loaded and evicts (LRU)."""

    def load_lora(self, name: str, path: Path) -> None:
        """Load the PEFT adapter in ``path`` under ``name``; raises if it does not fit the model."""
        ...

    def unload_lora(self, name: str) -> None: ...


TEXT_ONLY: frozenset[Modality] = frozenset({Modality.TEXT})


def runs_onnx(adapter_class: type) -> bool:
    """Whether the class runs an ONNX graph: it says so with a class attribute ``runs_onnx = True``.
    Weight copies and downloads keep ``*.onnx`` files only for such adapters (``engine.weight_files``);
    an optional attribute rather than a protocol member, so the other families need not declare it."""
    return bool(getattr(adapter_class, "runs_onnx", False))


def reads_item_metadata(adapter: object) -> bool:
    """Whether the family reads an item's ``metadata``: it says so with a class attribute
    ``reads_item_metadata = True`` and then gets its texts as ``AnnotatedText``; optional, like
    ``runs_onnx``, so the other families need not declare it."""
    return bool(getattr(adapter, "reads_item_metadata", False))


def prepares_on_pool(adapter: object) -> bool:
    """Whether the family's ``prepare`` always runs on the CPU pool, however short the input
    (``prepares_on_pool = True``): a chat template and a multimodal processor cost milliseconds even
    for a short text, too long to hold the event loop."""
    return bool(getattr(adapter, "prepares_on_pool", False))


def reads_image_text(adapter: object) -> bool:
    """Whether an item's text reaches the family beside its image (``ImageData.text``): a chat VLM
    (Qwen3-VL) says so with ``reads_image_text = True``; others embed the image alone, as before."""
    return bool(getattr(adapter, "reads_image_text", False))


def places_instruction(adapter: object) -> bool:
    """Whether the family places an encode request's instruction itself (``places_instruction =
    True``): it then gets it as ``Forward.task.instruction`` (Qwen3-VL's system turn) and the text
    bare, instead of the engine's ``"{instruction} {text}"``."""
    return bool(getattr(adapter, "places_instruction", False))


def reads_item_state(adapter: object) -> bool:
    """Whether an item may carry, instead of a text, a Laya state in ``metadata.state``
    (``reads_item_state = True``, with ``reads_item_metadata``): the family then gets it as an
    ``AnnotatedText`` with an empty text."""
    return bool(getattr(adapter, "reads_item_state", False)) and reads_item_metadata(adapter)


class UnsupportedInput(ValueError):
    """An item lacks what the adapter needs (e.g. a pair sent to a model that embeds single texts)."""


def texts_only(inputs: Sequence[ModelInput], family: str) -> list[str]:
    """The inputs of an adapter that embeds single texts; a pair is refused with the family's name."""
    if any(isinstance(one, ImageData) for one in inputs):
        raise UnsupportedInput(f"{family} models take text, not images")
    if any(not isinstance(one, str) for one in inputs):
        raise UnsupportedInput(f"{family} models embed single texts, not query-document pairs")
    return [one for one in inputs if isinstance(one, str)]
