"""The contract between the engine and a model family.

An adapter does two things, on two threads. ``prepare`` turns inputs (texts, query-document pairs or
images) into ``Prepared`` items on the CPU pool: tokenization or image decoding, plus whatever the
family adds (ColBERT's markers and query expansion, a pair's segments, an NLI model's hypotheses).
``run`` takes a batch of prepared items on the device thread and returns every output the
``Forward`` asks for, as NumPy, in one ``BatchOutputs``. One forward may yield several outputs (BGE-M3
gives dense, sparse and multivector from one pass). What an adapter can produce is declared up front
(``capabilities``), so the engine refuses a request before any work; how the engine must treat it
beyond that is declared too, as ``traits``. Both halves are told the ``Forward`` the items will take:
whether they are queries, the extraction task (labels and the family's options) and the LoRA to run
with. Output dtypes, normalisation and MUVERA are the engine's postprocessing, never the adapter's.
An adapter never sees a request, HTTP or the queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Protocol, cast, runtime_checkable

from sie.adapters.batch import BatchOutputs, ImageData, ModelInput, Prepared
from sie.core.options import (
    AttentionBackend,
    Capability,
    ComputePrecision,
    Modality,
    OverflowPolicy,
    Pooling,
)
from sie.core.task import Task, UnsupportedInput


class Trait(StrEnum):
    """How the engine must treat a family beyond its capabilities; a family lists its own in
    ``traits`` (a test keeps any other spelling out of the families)."""

    # Weight copies and downloads keep ``*.onnx`` files (``sie.weights.files``).
    RUNS_ONNX = "runs_onnx"
    # Texts come as ``AnnotatedText`` with the item's ``metadata`` (GLiREL's entities).
    READS_ITEM_METADATA = "reads_item_metadata"
    # An item may carry, instead of a text, a Laya state in ``metadata.state`` (an ``AnnotatedText``
    # with an empty text); only with ``READS_ITEM_METADATA``.
    READS_ITEM_STATE = "reads_item_state"
    # ``prepare`` always runs on the CPU pool, however short the input: a chat template and a
    # multimodal processor cost milliseconds even for a short text.
    PREPARES_ON_POOL = "prepares_on_pool"
    # An item's text reaches the family beside its image (``ImageData.text``): a chat VLM embeds both
    # as one input; other families embed the image alone.
    READS_IMAGE_TEXT = "reads_image_text"
    # The family places an encode request's instruction itself (``Forward.task.instruction``, Qwen3-VL's
    # system turn) and gets the text bare, instead of the engine's ``"{instruction} {text}"``.
    PLACES_INSTRUCTION = "places_instruction"


NO_TRAITS: Final[frozenset[Trait]] = frozenset()


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
    # ``overflow_policy``: under ``ERROR`` a family refuses an input past its window
    # (``Prepared.refused`` with ``INPUT_TOO_LONG``, ``sie.adapters.runtime.window``) instead of cutting it.
    overflow: OverflowPolicy = OverflowPolicy.DEFAULT


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
    # naming any other option is refused (``sie.catalog.options``).
    request_options: frozenset[str]
    traits: frozenset[Trait]

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


class Encoder(Adapter, Protocol):
    """A family with encode outputs (dense, sparse or multivector) says how wide they are; an
    extraction-only or scoring-only family has nothing to declare."""

    # Output sizes: dense dims, sparse vocabulary, multivector token dims.
    dims: Mapping[Capability, int]


ENCODE_OUTPUTS: Final = frozenset({Capability.DENSE, Capability.SPARSE, Capability.MULTIVECTOR})


def output_dims(adapter: Adapter) -> Mapping[Capability, int]:
    """The sizes of ``adapter``'s encode outputs (read once, at load): a family that declares an
    encode output is an ``Encoder``; one that declares none has no sizes."""
    if adapter.capabilities.isdisjoint(ENCODE_OUTPUTS):
        return {}
    return cast(Encoder, adapter).dims


@runtime_checkable
class TakesLora(Protocol):
    """An adapter that runs PEFT LoRA adapters per request (``Forward.lora``). Both methods run on the
    device thread, between batches; the engine decides what is loaded and evicts (LRU)."""

    def load_lora(self, name: str, path: Path) -> None:
        """Load the PEFT adapter in ``path`` under ``name``; raises if it does not fit the model."""
        ...

    def unload_lora(self, name: str) -> None: ...


@runtime_checkable
class SchedulesItsOwn(Protocol):
    """An adapter that runs work outside the engine's batches, on a scheduler of its own (a generator's
    continuous batching): the registry counts its ``running`` work with the queued items (eviction,
    ``sie_queue_depth``, KEDA), and its warm-up is its own (the engine's is one encode forward)."""

    @property
    def running(self) -> int: ...

    def warm_up(self) -> None: ...


TEXT_ONLY: frozenset[Modality] = frozenset({Modality.TEXT})


def texts_only(inputs: Sequence[ModelInput], family: str) -> list[str]:
    """The inputs of an adapter that embeds single texts; a pair is refused with the family's name."""
    if any(isinstance(one, ImageData) for one in inputs):
        raise UnsupportedInput(f"{family} models take text, not images")
    if any(not isinstance(one, str) for one in inputs):
        raise UnsupportedInput(f"{family} models embed single texts, not query-document pairs")
    return [one for one in inputs if isinstance(one, str)]
