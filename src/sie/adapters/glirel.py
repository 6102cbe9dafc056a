"""GLiREL zero-shot relation extraction: which of the request's relation types hold between the
entities a client names in each item's ``metadata.entities`` (character spans, as GLiNER returns them).

The ``glirel`` library owns the model: its word splitting, relation-type prompt, entity-pair scoring
and top-k decoding are what the checkpoints were trained with, so ``run`` calls its batch
``batch_predict_relations`` and our relations are the library's. ``prepare`` checks every entity
before anything runs (a bad span is the client's 400, not a failed batch), maps the character spans
onto the library's words, and tokenizes the text with the backbone's tokenizer for batching and
``usage``. The library reads the first ``max_len`` words of a text; an entity past them takes no part
(as the public server), and every entity is echoed in ``entities``.

The library builds its encoder with ``AutoModel.from_pretrained(model_name)``, the backbone's whole
pretrained weights, which the checkpoint then overwrites: loading here builds it from the backbone's
config alone (its tokenizer and config are all the checkpoint needs of it), and any weight the
checkpoint leaves unplaced fails the load.
"""

from __future__ import annotations

import argparse
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self

import glirel.modules.transformer_embeddings as glirel_embeddings
import torch
import yaml
from glirel import GLiREL
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModel

from sie.adapters.batch import AnnotatedText, BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import TEXT_ONLY, Forward, LoadSpec, Trait
from sie.adapters.options import finite_number, integer_option, is_offset, unit_option
from sie.adapters.runtime.state_dicts import folder_state_dict
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import absolute_positions, place_for_thresholds, release_unloaded
from sie.adapters.runtime.word_windows import WORD
from sie.catalog.families import GLIREL_OPTIONS
from sie.core.extraction import Entity, Extraction, Relation
from sie.core.options import Capability
from sie.core.task import Task, UnsupportedInput

_FAMILY: Final = "GLiREL"
NO_LABELS: Final = "GLiREL requires labels parameter for relation extraction"
NO_ENTITIES: Final = "GLiREL requires entities in item metadata for relation extraction"
# GLiREL scores every pair of an item's entities, so an item may name at most this many (the public
# server's bound).
MAX_ENTITIES: Final = 256
DEFAULT_TOP_K: Final = 10  # relations kept per entity pair, the public default
# Subword tokens a word may take when the backbone places any number (DeBERTa's relative positions):
# the public server's bound on one pass, which keeps its attention memory in check.
SUBWORDS_PER_WORD: Final = 4
_BACKBONE_LOCK = threading.Lock()


@dataclass(frozen=True)
class GlirelOptions:
    threshold: float
    top_k: int

    @classmethod
    def of(cls, task: Task) -> GlirelOptions:
        top_k = integer_option(task, "top_k", DEFAULT_TOP_K, _FAMILY)
        return cls(unit_option(task, "threshold", 0.3, _FAMILY), top_k)


@dataclass(frozen=True)
class _Relating:
    """One item as ``run`` reads it: the words the library reads, the named entities that lie in them
    as the library's inclusive word spans, and every named entity for the echo."""

    words: list[str]
    spans: list[list[Any]]  # [first word, last word, label, text], one per entity read
    read: list[Entity]  # the entities of ``spans``, in order
    named: list[Entity]
    read_text: str  # the part of the text the words cover: what ``usage`` counts


class GlirelExtractor:
    family = _FAMILY
    request_options = GLIREL_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = TEXT_ONLY
    traits = frozenset({Trait.READS_ITEM_METADATA})
    packs_tokens = False  # glirel pads each batch itself

    def __init__(self, model: Any, tokenizer: TextTokenizer) -> None:
        self._model = model
        self.tokenizer = tokenizer
        self._max_words = int(model.base_config.max_len)
        self._rel, self._sep = str(model.rel_token), str(model.sep_token)
        # One pass holds the relation-type prompt, the words read and the two specials: a backbone's
        # table of absolute positions bounds it, else the public per-word budget.
        encoder = model.token_rep_layer.bert_layer.model
        self._limit = absolute_positions(encoder) or SUBWORDS_PER_WORD * self._max_words
        self._counter = tokenizer.untruncated()

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        """The checkpoint (``glirel_config.json`` and ``pytorch_model.bin``) on the backbone its config
        names, whose tokenizer and config come from ``loadtime.tokenizer_id``'s folder when the profile
        names one, else from the hub cache (the environment decides offline). CPU runs float32 whatever
        the precision, as for GLiNER: relations are kept by comparing scores to a threshold."""
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        config = argparse.Namespace(**yaml.safe_load((spec.weights / "glirel_config.json").read_text()))
        if spec.tokenizer_weights is not None and spec.tokenizer_weights != spec.weights:
            config.model_name = str(spec.tokenizer_weights)
        with _backbone_from_config():
            model = GLiREL(config)
        state = folder_state_dict(spec.weights)
        missing, _ = model.load_state_dict(state, strict=False)
        if missing:
            shown = ", ".join(sorted(missing)[:5])
            raise ValueError(f"{spec.weights} does not fit GLiREL: its checkpoint has no weights for {shown}")
        place_for_thresholds(model, spec)
        backend = model.token_rep_layer.bert_layer.tokenizer.backend_tokenizer
        return cls(model, TextTokenizer(Tokenizer.from_str(backend.to_str()), spec.max_seq_length))

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        task = forward.task
        if task is None or not task.labels:
            raise UnsupportedInput(NO_LABELS)
        GlirelOptions.of(task)  # refuse bad options before the item is queued
        room = self._limit - 2 - self._prompt_tokens(task.labels)
        if room < 1:
            raise UnsupportedInput(
                f"GLiREL reads the relation types and a text in one pass of at most {self._limit} tokens; "
                "these relation types fill it: send fewer or shorter ones"
            )
        relating = []
        for one in inputs:
            if not isinstance(one, AnnotatedText):
                raise UnsupportedInput(f"{_FAMILY} models take a text with entities, not images or pairs")
            relating.append(self._relating(one.text, one.metadata, room))
        read = self.tokenizer.encode([item.read_text for item in relating])
        return [Prepared(ids, payload=item) for ids, item in zip(read, relating, strict=True)]

    def _prompt_tokens(self, labels: Sequence[str]) -> int:
        """Tokens of the library's prompt: ``[REL] type`` for each relation type, then ``[SEP]``."""
        pieces = [piece for label in labels for piece in (self._rel, label)] + [self._sep]
        return sum(len(ids) for ids in self._counter.encode(pieces, special_tokens=False))

    def _relating(self, text: str, metadata: Mapping[str, Any], room: int) -> _Relating:
        """The item as the library reads it: its first ``max_len`` words, fewer when their subwords
        would overflow the ``room`` the prompt leaves in one pass."""
        named = [_entity(one, text) for one in _entity_list(metadata)]
        every = [(match.group(), match.start(), match.end()) for match in WORD.finditer(text)]
        words = every[: self._max_words]
        pieces = self._counter.encode([word for word, _, _ in words], special_tokens=False)
        used = 0
        for count, ids in enumerate(pieces):
            used += len(ids)
            if used > room:
                words = words[:count]
                break
        read_end = len(text) if len(every) == len(words) else words[-1][2] if words else 0
        spans, read, taken = [], [], set()
        for entity in named:
            start, end = entity.start or 0, entity.end or 0
            if end > read_end and text[read_end:end].strip():
                continue  # reaches past the words the library reads
            covered = [i for i, (_, first, last) in enumerate(words) if last > start and first < end]
            if (covered[0], covered[-1]) in taken:
                continue  # the same words named twice: one span, or the library relates it to itself
            taken.add((covered[0], covered[-1]))
            spans.append([covered[0], covered[-1], entity.label or "ENTITY", entity.text])
            read.append(entity)
        return _Relating([word for word, _, _ in words], spans, read, named, text[:read_end])

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        assert forward.task is not None
        options = GlirelOptions.of(forward.task)
        items: list[_Relating] = [prepared.payload for prepared in batch]
        asked = [item for item in items if len(item.spans) > 1]  # a relation needs two entities
        found: dict[int, list[dict[str, Any]]] = {}
        if asked:
            with torch.inference_mode():
                rows = self._model.batch_predict_relations(
                    [item.words for item in asked],
                    list(forward.task.labels),
                    threshold=options.threshold,
                    ner=[item.spans for item in asked],
                    top_k=options.top_k,
                )
            found = {id(item): row for item, row in zip(asked, rows, strict=True)}
        return BatchOutputs(
            extractions=[
                Extraction(entities=item.named, relations=_relations(item, found.get(id(item), [])))
                for item in items
            ]
        )

    def close(self) -> None:
        del self._model
        release_unloaded()


def _entity_list(metadata: Mapping[str, Any]) -> list[Any]:
    entities = metadata.get("entities")
    if entities is None or entities == []:
        raise UnsupportedInput(NO_ENTITIES)
    if not isinstance(entities, list):
        raise UnsupportedInput("GLiREL item metadata.entities must be a list")
    if len(entities) > MAX_ENTITIES:
        raise UnsupportedInput(f"GLiREL items may carry at most {MAX_ENTITIES} entities in metadata")
    return entities


def _entity(raw: Any, text: str) -> Entity:
    """One named entity, checked: character offsets ``0 <= start < end <= len(text)`` covering a word."""
    if not isinstance(raw, dict):
        raise UnsupportedInput("GLiREL entities must be objects")
    start, end = raw.get("start"), raw.get("end")
    if not is_offset(start) or not is_offset(end) or not 0 <= start < end <= len(text):
        raise UnsupportedInput(
            "GLiREL entity metadata requires integer character offsets with "
            f"0 <= start < end <= {len(text)} (the text's length)"
        )
    if not text[start:end].strip():
        raise UnsupportedInput(f"GLiREL entity span [{start}, {end}) does not cover any text token")
    score = finite_number(raw.get("score", 1.0))
    if not math.isfinite(score):
        raise UnsupportedInput("GLiREL entity score must be a finite number")
    label, name = raw.get("label", ""), raw.get("text", text[start:end])
    if not isinstance(label, str) or not isinstance(name, str):
        raise UnsupportedInput("GLiREL entity label and text must be strings")
    return Entity(name, label, score, start, end)


def _relations(item: _Relating, found: list[dict[str, Any]]) -> list[Relation]:
    """The library's relations, in its order (best first per pair), each end named by the client's
    entity text where the span is one it named."""
    by_span = {
        (span[0], span[1] + 1): entity.text for span, entity in zip(item.spans, item.read, strict=True)
    }

    def name(one: dict[str, Any], role: str) -> str:
        position = one[f"{role}_pos"]
        return by_span.get((position[0], position[1]), " ".join(one[f"{role}_text"])).strip()

    return [
        Relation(name(one, "head"), name(one, "tail"), str(one["label"]), float(one["score"]))
        for one in found
    ]


class _ConfigOnly:
    """``AutoModel`` as glirel calls it, building the backbone from its config: the checkpoint holds
    every backbone weight, so reading the pretrained ones first would only cost a download."""

    @staticmethod
    def from_pretrained(name: str | Path) -> Any:
        return AutoModel.from_config(AutoConfig.from_pretrained(str(name)))  # type: ignore[no-untyped-call]


@contextmanager
def _backbone_from_config() -> Iterator[None]:
    with _BACKBONE_LOCK:
        original = glirel_embeddings.AutoModel
        glirel_embeddings.AutoModel = _ConfigOnly
        try:
            yield
        finally:
            glirel_embeddings.AutoModel = original
