"""GLiFormer (knowledgator's multi-task encoders): text embeddings, and entities, relations,
classifications and structured ``data`` from one prompt (``gliformer_tasks``, ``gliformer_schema``).

The ``gliformer`` library owns the model: its word splitting, task prompt, heads and decoders are
what the checkpoints were trained with, so ``run`` calls its ``embed_text`` and ``inference`` and the
answers are the library's. Four things are ours:

- **Batching.** The library pads a batch's documents to the longest, and its NER head scores padded
  word positions as any other (logit 0): a span ending a shorter document took the padding as its
  right neighbour and scored at most 0.5, and below a 0.5 threshold padded positions formed spans of
  their own. Padded positions are masked out of every NER pass (the NER head's, and the pass a head
  with a NER head of its own runs), so a document answers the same alone or in any batch.
- **Checks before anything is queued.** ``prepare`` reads the task once (``Plan``), measures its
  prompt with a copy of the library's processor (the tokenizer ``run`` uses is never touched from
  another thread): the prompt may take at most ``max_prompt_tokens`` (512) tokens, the public bound,
  and must leave room for the document in the model's ``max_len``. A longer document is cut there,
  by the library, as the public server cuts it.
- **Usage.** An item costs, and bills, the document tokens the model reads plus the two specials,
  not the prompt (the public server's count).
- **Bounded decoding.** The library's span decoders do work quadratic in a document's candidate
  spans; ``gliformer.decoding`` puts bounded tensor versions in their place (the same answers below
  the public server's bounds), and the joint head relates at most 100 entities a document.

``encode`` returns the embedding head's vector of the bare text (an instruction is not read, as by the
public server); the engine normalises it unless ``options.normalize`` is false. CPU runs float32
whatever the precision, as for GLiNER: spans and classes are kept by comparing scores to a threshold.
"""

from __future__ import annotations

import copy
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Self

import numpy as np
import torch
from gliformer import GLiFormer
from gliformer.processing.schema import build_structuring_output_formatter, normalize_structuring_schemas
from tokenizers import Tokenizer

from sie.adapters.batch import AnnotatedText, BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import TEXT_ONLY, Forward, LoadSpec, Trait
from sie.adapters.gliformer import decoding
from sie.adapters.gliformer.schema import clip
from sie.adapters.gliformer.tasks import FAMILY, MAX_TYPE_SETS, Plan, named_entities
from sie.adapters.options import loadtime_integer
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import absolute_positions, place_for_thresholds, release_unloaded
from sie.catalog.families import GLIFORMER_OPTIONS
from sie.core.extraction import Entity, Extraction
from sie.core.options import Capability
from sie.core.task import UnsupportedInput

DEFAULT_MAX_PROMPT_TOKENS: Final = 512
# Distinct task prompts whose token counts are kept: a repeated task is not measured again.
_MEASURED: Final = 256
NO_TEXT: Final = "GLiFormer requires non-blank text"
# The joint head relates every pair of the entities it keeps: the most confident this many per
# document (the public server's bound; the library ranks and cuts them itself), so a long document at
# a low threshold scores at most 9,900 pairs a relation type, not millions.
MAX_RELATION_ENTITIES: Final = 100
# The heads that run a NER pass of their own for their entity candidates, and the method that does.
_NER_PASSES: Final = {"joint_relex": "_forward_ner", "structuring": "_forward_entity_ner"}


@dataclass(frozen=True)
class _Document:
    """One item as ``run`` reads it: its text and the entities it named (None when it named none)."""

    text: str
    named: list[Entity] | None

    @property
    def entity_types(self) -> tuple[str, ...] | None:
        """The prompt's entity types for an item that names its entities: the labels they carry, in a
        fixed order so that order alone never makes two prompts."""
        return None if self.named is None else tuple(sorted({entity.label or "" for entity in self.named}))


class GliformerModel:
    family = FAMILY
    request_options = GLIFORMER_OPTIONS
    capabilities = frozenset({Capability.DENSE, Capability.EXTRACT})
    inputs = TEXT_ONLY
    # It places the instruction by ignoring it: the embedding head reads the bare text.
    traits = frozenset({Trait.READS_ITEM_METADATA, Trait.PLACES_INSTRUCTION})
    packs_tokens = False  # the library pads each batch itself

    def __init__(self, model: Any, tokenizer: TextTokenizer, loadtime: dict[str, Any]) -> None:
        self._model = model
        self.tokenizer = tokenizer
        self.dims = {Capability.DENSE: int(model.config.embedding_config.projection_dim)}
        self._window = int(model.config.max_len)
        self._max_prompt = loadtime_integer(loadtime, "max_prompt_tokens", DEFAULT_MAX_PROMPT_TOKENS)
        # ``prepare`` measures with its own copy of the library's processor, under its own lock.
        self._measurer = copy.deepcopy(model.data_processor)
        self._measure_lock = threading.Lock()
        self._measured: OrderedDict[str, int] = OrderedDict()
        self._specials = int(self._measurer.transformer_tokenizer.num_special_tokens_to_add(pair=False))

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        """The checkpoint folder as the library reads it (``gliner_config.json``, its weights and
        tokenizer), its window the YAML's ``max_sequence_length`` when it sets one."""
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        decoding.install()
        with warnings.catch_warnings():
            # The checkpoints ask for the optional flashdeberta kernels; the library's own attention
            # runs without them, as on the public server.
            warnings.filterwarnings("ignore", message=".*flashdeberta.*")
            model = GLiFormer.from_pretrained(
                str(spec.weights),
                model_dir=str(spec.weights),
                load_tokenizer=True,
                local_files_only=True,
                map_location="cpu",
                max_length=spec.max_seq_length,
            )
        # A backbone with a table of absolute positions cannot place more tokens than it holds: the
        # window the library cuts prompt and document to (its ``max_len``) stops there.
        positions = absolute_positions(model.model.token_rep_layer.bert_layer.model)
        if positions is not None and positions < int(model.config.max_len):
            model.config.max_len = positions
        place_for_thresholds(model, spec)
        _mask_padding(model.model)
        _bound_relation_entities(model.model)
        model.model.register_forward_hook(lambda _module, _args, output: _float32_scores(output))
        library_tokenizer = model.data_processor.transformer_tokenizer
        # ``embed_text`` cuts at the tokenizer's own limit, which a saved tokenizer may leave unbounded.
        library_tokenizer.model_max_length = int(model.config.max_len)
        backend = Tokenizer.from_str(library_tokenizer.backend_tokenizer.to_str())
        return cls(model, TextTokenizer(backend, int(model.config.max_len)), spec.loadtime)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        if Capability.EXTRACT not in forward.outputs:
            texts = [self._text(one) for one in inputs]
            return [
                Prepared(ids, payload=_Document(text, None))
                for ids, text in zip(self.tokenizer.encode(texts), texts, strict=True)
            ]
        documents = [self._document(one) for one in inputs]
        supplied = [document.named is not None for document in documents]
        if any(supplied) and not all(supplied):
            raise UnsupportedInput(
                "GLiFormer relation extraction requires non-empty entities in every item metadata"
            )
        plan = Plan.of(forward.task, any(supplied))
        plan.check_named_labels(
            len({entity.label for document in documents for entity in document.named or ()})
        )
        sets = {document.entity_types for document in documents}
        if len(sets) > MAX_TYPE_SETS:
            raise UnsupportedInput(
                f"GLiFormer item metadata may use at most {MAX_TYPE_SETS} distinct sets of entity labels per request"
            )
        with self._measure_lock:
            rooms = {types: self._room(plan, types) for types in sets}
            read = self._read([document.text for document in documents])
        return [
            Prepared(
                np.zeros(0, dtype=np.int64),
                payload=replace(document, text=text),
                weight=min(count, rooms[document.entity_types]) + self._specials,
            )
            for document, (text, count) in zip(documents, read, strict=True)
        ]

    def _text(self, one: ModelInput) -> str:
        text = one.text if isinstance(one, AnnotatedText) else one
        if not isinstance(text, str):
            raise UnsupportedInput(f"{FAMILY} models take text, not images or pairs")
        if not text.strip():
            raise UnsupportedInput(NO_TEXT)
        return text

    def _document(self, one: ModelInput) -> _Document:
        text = self._text(one)
        return _Document(text, named_entities(one) if isinstance(one, AnnotatedText) else None)

    def _room(self, plan: Plan, types: tuple[str, ...] | None) -> int:
        """The document tokens one pass leaves beside this prompt; the prompt's bounds are checked."""
        heads = plan.heads(list(types) if types is not None else plan.entity_types)
        key = repr(heads)
        used = self._measured.get(key)
        if used is None:
            used = self._prompt_tokens(heads)
            self._measured[key] = used
            if len(self._measured) > _MEASURED:
                self._measured.popitem(last=False)
        self._measured.move_to_end(key)
        if used > self._max_prompt:
            raise UnsupportedInput(
                f"GLiFormer task prompt needs {used} tokens; labels, relation types, class labels, and "
                f"schema fields may take at most {self._max_prompt}"
            )
        if used + self._specials >= self._window:
            raise UnsupportedInput(
                "GLiFormer task prompt leaves no document tokens within max_sequence_length"
            )
        return self._window - self._specials - used

    def _prompt_tokens(self, heads: dict[str, Any]) -> int:
        """The tokens of the library's prompt for ``heads``, built by its processor on a one-word text;
        the structuring answer's formatter ``run`` builds is built here too, so that a template the
        library cannot read is the client's 400 here, not the whole batch's 500 there."""
        processor = self._measurer
        try:
            raw = processor.collate_raw_batch(
                self._model._build_inference_input([["x"]], **_normalised(heads))
            )
            if heads.get("structures"):
                build_structuring_output_formatter(heads["structures"])
        except (TypeError, ValueError) as exc:
            # The library reads a template more than once and unescapes it each time: a property named
            # "$type", "$items", "$enum", "$required" or "!" reaches a later reading as a marker it refuses.
            raise UnsupportedInput(f"GLiFormer cannot build the task prompt: {clip(str(exc))}") from exc
        sequences, lengths = processor.prepare_inputs(raw["tokens"], raw["classes_mapping"])
        prompt = list(sequences[0][: lengths[0]])
        encoded = processor.transformer_tokenizer(
            [prompt], is_split_into_words=True, add_special_tokens=False
        )
        return len(encoded["input_ids"][0])

    def _read(self, texts: list[str]) -> list[tuple[str, int]]:
        """Each text as the library reads it, and its tokens: its first ``max_len`` words (the rest
        cut here, where the library would cut it with a warning for every document), each word
        tokenized on its own, so the count does not depend on the prompt in front."""
        processor = self._measurer
        cut, words = [], []
        for text in texts:
            found = list(processor.words_splitter(text))
            kept = found[: self._window]
            cut.append(text[: kept[-1][2]] if len(found) > len(kept) else text)
            words.append([word for word, _, _ in kept])
        encoded = processor.transformer_tokenizer(words, is_split_into_words=True, add_special_tokens=False)
        return [(text, len(ids)) for text, ids in zip(cut, encoded["input_ids"], strict=True)]

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        documents: list[_Document] = [prepared.payload for prepared in batch]
        if Capability.EXTRACT not in forward.outputs:
            with torch.inference_mode():
                vectors = self._model.embed_text(
                    [document.text for document in documents], batch_size=len(documents)
                )
            return BatchOutputs(dense=vectors.float().cpu().numpy())
        return BatchOutputs(extractions=self._extract(documents, forward))

    def _extract(self, documents: list[_Document], forward: Forward) -> list[Extraction]:
        """Items grouped by their prompt (a request's, or the labels an item's entities carry), each
        group one library call; answers in batch order."""
        answers: list[Extraction | None] = [None] * len(documents)
        groups: dict[tuple[bool, tuple[str, ...] | None], list[int]] = {}
        for index, document in enumerate(documents):
            groups.setdefault((document.named is not None, document.entity_types), []).append(index)
        for (supplied, types), indices in groups.items():
            plan = Plan.of(forward.task, supplied)
            heads = plan.heads(list(types) if types is not None else plan.entity_types)
            texts = [documents[index].text for index in indices]
            with torch.inference_mode():
                found = self._model.inference(
                    texts,
                    **heads,
                    threshold=plan.threshold,
                    flat_ner=plan.flat_ner,
                    multi_label=plan.multi_label,
                    batch_size=len(texts),
                )
            rows = _rows(found, len(texts), heads.get("structures"))
            for index, row in zip(indices, rows, strict=True):
                answers[index] = plan.answer(documents[index].text, row, documents[index].named)
        return [answer for answer in answers if answer is not None]

    def close(self) -> None:
        del self._model
        release_unloaded()


def _normalised(heads: dict[str, Any]) -> dict[str, Any]:
    """``heads`` as ``inference`` passes them on: templates in the library's wire form."""
    structures = heads.get("structures")
    return {**heads, "structures": None if structures is None else normalize_structuring_schemas(structures)}


def _rows(found: dict[str, Any], count: int, structures: Any) -> list[dict[str, Any]]:
    """The library's answer per task as one row per document; a structuring answer put through the
    library's own formatter (the best value of a single-valued field, list fields as lists), as its
    ``structure`` does."""
    formatter = build_structuring_output_formatter(structures) if structures else None
    rows: list[dict[str, Any]] = [{} for _ in range(count)]
    for task in ("ner", "classification", "joint_relex", "structuring"):
        values = found.get(task)
        if values is None:
            continue
        for row, value in zip(rows, values, strict=True):
            row[task] = value
    if formatter is not None:
        for row in rows:
            if "structuring" in row:
                row["structuring"] = formatter.format_batch([row["structuring"]])[0]
    return rows


def _mask_padding(model: Any) -> None:
    """Mask padded word positions out of every NER pass (see the module docstring): the NER head's
    output, and the pass of each head that holds a NER head of its own."""
    heads = model.heads
    if "ner" in heads:
        heads["ner"].register_forward_hook(lambda _module, _args, output: _masked(output))
    for name, head in heads.items():
        method = _NER_PASSES.get(name)
        if method is not None and getattr(head, "_owns_ner_head", False):
            vars(head)[method] = _masking(getattr(head, method))


def _float32_scores(output: Any) -> Any:
    """The model's score outputs (``*_logits``, ``*_scores``) in float32 before the library's decoders
    read them: in float16 (the profiles' GPU precision) a sigmoid of a logit above about 8.3 rounds
    to exactly 1.0, so near-certain spans tie and a single-label question answers its first class."""
    for name, value in list(output.items()):
        if (
            name.endswith(("_logits", "_scores"))
            and isinstance(value, torch.Tensor)
            and value.is_floating_point()
        ):
            output[name] = value.float()
    return output


def _bound_relation_entities(model: Any) -> None:
    for name, head in model.heads.items():
        if name == "joint_relex":
            kept = getattr(head, "max_relation_entities", None)
            head.max_relation_entities = (
                MAX_RELATION_ENTITIES if kept is None else min(kept, MAX_RELATION_ENTITIES)
            )


def _masking(ner_pass: Callable[..., Any]) -> Callable[..., Any]:
    def masked(*args: Any, **kwargs: Any) -> Any:
        return _masked(ner_pass(*args, **kwargs))

    return masked


def _masked(output: Any) -> Any:
    """A NER head's output with its padded word positions at logit -inf (probability 0)."""
    logits = getattr(output, "logits", None)
    mask = (getattr(output, "extra", None) or {}).get("mask")
    if isinstance(logits, torch.Tensor) and isinstance(mask, torch.Tensor) and logits.dim() == 4:
        padded = ~mask.bool()
        if bool(padded.any()):
            output.logits = logits.masked_fill(padded[:, :, None, None], float("-inf"))
    return output
