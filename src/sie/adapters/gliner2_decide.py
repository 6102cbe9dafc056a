"""GLiNER2.5-Decide typed decisions (``fastino/GLiNER2.5-Decide``, ``-multi-Decide``, ``-Decide-1B``):
every label of every task gets a probability (``sie.adapters.decide.decisions`` has the request shapes and
the answers).

The gliner2 library loads the checkpoint (``AutoExtractor``: span or boundary heads over a DeBERTa
or ModernBERT encoder) and builds the task prompt; the model reads one row per item, ``(task
prompts and labels) [SEP_TEXT] document``, and scores each label from the encoder's state at its
``[L]`` marker with the library's classifier, as the library's own classification does. A task's
probabilities therefore depend on the other tasks sent with it. The library's public
``batch_classify_text`` returns only the chosen label of a single-label task, so the row is built
here the way its processor builds it: the prompt once per request shape (its tokens up to
``[SEP_TEXT]``), then the document's words, lowercased, each tokenized alone (``gliner2_words``
finds them), after a ``.`` when the text does not end a sentence.

An item is a text, or a Laya state in ``metadata.state`` (a string, an object rendered as JSON, or a
list of conversation turns, of which the newest are read). The row holds ``max_sequence_length``
tokens (512 by default): the prompt may take ``max_prompt_tokens`` of them (by default half, at most
512; more is a 400) and the document the whole words that fit in the rest, unless
``options.overflow_policy`` is ``"error"``, which refuses a document that does not fit whole.
Reading stops at the window, so a long document costs no more than one that fills it.

CPU runs float32 and a GPU the profile's precision (the library's own ``quantize`` is a plain
cast); ``adapter_options.loadtime.cuda_graphs`` (the public server's replay of the encoder as CUDA
graphs) is accepted and the forward runs eagerly.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Self

import numpy as np
import torch
from gliner2 import AutoExtractor
from gliner2.processing.word_splitter import WhitespaceTokenSplitter
from tokenizers import Tokenizer

from sie.adapters.batch import AnnotatedText, BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import TEXT_ONLY, Forward, LoadSpec, Trait
from sie.adapters.decide.decisions import (
    FAMILY,
    DecisionRequest,
    answer,
    classifications,
    parse_request,
    per_task,
)
from sie.adapters.decide.typed_questions import STATE_BYTES_PER_TOKEN, rendered_state
from sie.adapters.decide.words import words
from sie.adapters.options import eager_cuda_graphs
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import place_for_thresholds, release_unloaded
from sie.catalog.families import DECIDE_OPTIONS
from sie.core.extraction import Extraction, ItemError
from sie.core.options import Capability
from sie.core.task import ItemRefused, UnsupportedInput
from sie.wire.errors import ErrorCode

DEFAULT_WINDOW: Final = 512
MAX_PROMPT_TOKENS: Final = 512
OVERFLOW_POLICIES: Final = ("default", "truncate_text", "error")
# A word longer than this, or reaching past this many characters (or words) per token of the room
# left, ends the part of a document that is read: a document is never scanned far past its window.
MAX_WORD_CHARS: Final = 4096
MAX_CHARS_PER_TOKEN: Final = 64
MAX_WORDS_PER_TOKEN: Final = 4
SENTENCE_ENDS: Final = (".", "!", "?")
WORD_CACHE: Final = 16384  # token ids of recent words of at most CACHED_WORD_CHARS characters
CACHED_WORD_CHARS: Final = 32
PROMPT_CACHE: Final = 256  # prompts of recent request shapes, of schemas up to CACHED_PROMPT_CHARS
CACHED_PROMPT_CHARS: Final = 4096
_RUN: Final = re.compile(r"\S+")

ITEM_ERROR: Final = (
    f"{FAMILY} items need a non-blank text, or metadata.state holding a string, a JSON object, or a "
    "list of turns (not both)"
)


@dataclass(frozen=True, slots=True)
class Prompt:
    """A request's task prompt: its token ids up to and including ``[SEP_TEXT]``, each label's marker."""

    ids: list[int]
    markers: list[int]


@dataclass(frozen=True, slots=True)
class Row:
    """What ``run`` needs of an item besides its ids: the request and where its labels are read."""

    request: DecisionRequest
    markers: list[int]


class Gliner2Decider:
    family = FAMILY
    request_options = DECIDE_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = TEXT_ONLY
    packs_tokens = False
    traits = frozenset({Trait.READS_ITEM_METADATA, Trait.READS_ITEM_STATE})

    def __init__(self, model: Any, window: int, prompt_limit: int) -> None:
        self._model = model
        processor = model.processor
        processor.change_mode(is_training=False)
        self._processor = processor
        self._hf = processor.tokenizer
        backend = self._hf.backend_tokenizer
        self.tokenizer = TextTokenizer(Tokenizer.from_str(backend.to_str()), window)
        self._pad = int(self._hf.pad_token_id or 0)
        self._window = window
        self._prompt_limit = prompt_limit
        self._prompts: OrderedDict[str, Prompt] = OrderedDict()  # by the tasks' schema
        self._lock = threading.Lock()  # the processor's prompt builder and the prompt cache
        self._cached_ids = lru_cache(maxsize=WORD_CACHE)(self._ids)

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        loadtime = spec.loadtime
        eager_cuda_graphs(loadtime, FAMILY)
        window = spec.max_seq_length or DEFAULT_WINDOW
        prompt_limit = loadtime.get("max_prompt_tokens", min(window // 2, MAX_PROMPT_TOKENS))
        if (
            isinstance(prompt_limit, bool)
            or not isinstance(prompt_limit, int)
            or not 0 < prompt_limit < window
        ):
            raise ValueError(f"{FAMILY} needs 0 < max_prompt_tokens < max_sequence_length ({window})")
        model = AutoExtractor.from_pretrained(str(spec.weights), map_location=spec.device)
        if not hasattr(model, "classifier") or not hasattr(model, "encoder"):
            raise ValueError(f"{spec.weights} has no classification head: not a GLiNER2 decision model")
        if not isinstance(model.processor.word_splitter, WhitespaceTokenSplitter):
            raise ValueError(
                f"{FAMILY} reads words as gliner2's WhitespaceTokenSplitter does; this model splits otherwise"
            )
        place_for_thresholds(model, spec)
        return cls(model, window, prompt_limit)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        request = parse_request(forward.task)
        policy = forward.task.option("overflow_policy", "default") if forward.task else "default"
        if not isinstance(policy, str) or policy not in OVERFLOW_POLICIES:
            raise UnsupportedInput(f"{FAMILY} overflow_policy must be one of {sorted(OVERFLOW_POLICIES)}")
        prompt = self._prompt(request)
        room = self._window - len(prompt.ids)
        row = Row(request, prompt.markers)
        prepared = []
        for one in inputs:  # an item that cannot be read fails alone; the request's others are answered
            try:
                ids = self._document_ids(one, room, policy)
            except ItemRefused as exc:
                prepared.append(Prepared.refused(exc.error))
                continue
            prepared.append(Prepared(np.asarray(prompt.ids + ids, dtype=np.int64), payload=row))
        return prepared

    def _document_ids(self, one: ModelInput, room: int, policy: str) -> list[int]:
        """The ids of the words of an item the model reads, or its ``ItemRefused``."""
        text, from_end, whole = self._document(one, room)
        ids, complete = self._read(text, room, from_end, whole)
        if not ids:
            raise ItemRefused(
                ErrorCode.INPUT_TOO_LONG.value,
                f"No word of the document fits in the {room} tokens the questions leave in the model's "
                f"{self._window}-token window (a word longer than {MAX_WORD_CHARS} characters is not read)",
            )
        if not complete and policy == "error":
            raise ItemRefused(
                ErrorCode.INPUT_TOO_LONG.value,
                f"The document does not fit in the {room} tokens the questions leave in the model's "
                f"{self._window}-token window (overflow_policy 'error')",
            )
        return ids

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        rows: list[Row] = [item.payload for item in batch]
        extractions = []
        for row, logits in zip(rows, self._logits(batch, rows), strict=True):
            if not np.isfinite(logits).all():  # this item's answer alone, as the public server's
                error = ItemError(ErrorCode.INFERENCE_ERROR.value, f"{FAMILY} returned non-finite scores")
                extractions.append(Extraction(error=error))
                continue
            request = row.request
            probabilities = per_task(request, logits)
            data = (
                {}
                if request.mode == "labels"
                else {
                    task.key: answer(task, p, request.threshold)
                    for task, p in zip(request.tasks, probabilities, strict=True)
                }
            )
            found = [] if request.mode == "questions" else classifications(request, probabilities)
            extractions.append(Extraction(classifications=found, data=data))
        return BatchOutputs(extractions=extractions)

    def _logits(self, batch: Sequence[Prepared], rows: list[Row]) -> list[np.ndarray]:
        """Each row's label logits, read at that row's own markers: a batch is one request shape, but
        two requests whose options compare equal (``1`` and ``True``) may render different prompts."""
        width = max(len(item.ids) for item in batch)
        ids = np.full((len(batch), width), self._pad, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for index, item in enumerate(batch):
            ids[index, : len(item.ids)] = item.ids
            mask[index, : len(item.ids)] = 1
        which = np.repeat(np.arange(len(rows)), [len(row.markers) for row in rows])
        where = np.asarray([marker for row in rows for marker in row.markers], dtype=np.int64)
        device = next(self._model.parameters()).device
        with torch.inference_mode():
            hidden = self._model.encoder(
                input_ids=torch.from_numpy(ids).to(device), attention_mask=torch.from_numpy(mask).to(device)
            ).last_hidden_state
            markers = hidden[torch.from_numpy(which).to(device), torch.from_numpy(where).to(device)]
            flat = self._model.classifier(markers).squeeze(-1).float().cpu().numpy()
        return np.split(flat, np.cumsum([len(row.markers) for row in rows])[:-1])

    def _prompt(self, request: DecisionRequest) -> Prompt:
        """The processor's prompt for the request's tasks, kept for the next request of that shape."""
        schema = request.library_schema()
        shape = json.dumps(schema, ensure_ascii=False, default=str)
        with self._lock:
            cached = self._prompts.get(shape)
            if cached is not None:
                self._prompts.move_to_end(shape)
                return cached
            record = self._processor.transform_and_format(".", schema)
            # The processor keeps every string it tokenizes (50,000 of them); a prompt's descriptions
            # would stay there for the model's lifetime.
            clear = getattr(getattr(self._processor, "_tokenize_cached", None), "cache_clear", None)
            if clear is not None:
                clear()
        ids = list(record.input_ids[: record.text_word_first_positions[0]])
        if len(ids) > self._prompt_limit:
            raise UnsupportedInput(
                f"{FAMILY} questions and labels take {len(ids)} tokens; this model takes at most "
                f"{self._prompt_limit} of its {self._window}-token window. Send fewer or shorter questions, "
                "labels, instructions or descriptions."
            )
        positions: list[list[int]] = record.schema_special_positions
        if [len(task) for task in positions] != [len(task.labels) + 1 for task in request.tasks]:
            raise RuntimeError(f"{FAMILY} prompt markers do not match the request's labels")
        prompt = Prompt(ids, [position for task in positions for position in task[1:]])
        if len(shape) <= CACHED_PROMPT_CHARS:
            with self._lock:
                self._prompts[shape] = prompt
                while len(self._prompts) > PROMPT_CACHE:
                    self._prompts.popitem(last=False)
        return prompt

    @staticmethod
    def _document(one: ModelInput, room: int) -> tuple[str, bool, bool]:
        """(text, read from its end, the text is the whole document) of an item."""
        if isinstance(one, AnnotatedText):
            text, metadata = one.text, one.metadata
        elif isinstance(one, str):
            text, metadata = one, {}
        else:
            raise UnsupportedInput(f"{FAMILY} models take text, not images or pairs")
        if "state" in metadata:
            state = metadata["state"]
            if text or not isinstance(state, str | Mapping | list):
                raise ItemRefused(ErrorCode.INVALID_INPUT.value, ITEM_ERROR)
            limit = room * STATE_BYTES_PER_TOKEN
            try:
                text = rendered_state(state, limit, from_end=isinstance(state, list))
            except (TypeError, ValueError) as exc:
                raise ItemRefused(
                    ErrorCode.INVALID_INPUT.value, f"{FAMILY} metadata.state must be JSON-serializable"
                ) from exc
            from_end, whole = isinstance(state, list), len(text.encode("utf-8", "surrogatepass")) < limit
        else:
            from_end, whole = False, True
        if not text or text.isspace():
            raise ItemRefused(ErrorCode.INVALID_INPUT.value, ITEM_ERROR)
        return text, from_end, whole

    def _read(self, text: str, room: int, from_end: bool, whole: bool) -> tuple[list[int], bool]:
        """The ids of the whole words of ``text`` that fit in ``room``, and whether that is all of
        the caller's text (the ``.`` the processor adds may be left out)."""
        normalized = text if text.endswith(SENTENCE_ENDS) else text + "."
        found = self._words_from_end(normalized) if from_end else words(normalized)
        kept: list[tuple[int, ...]] = []
        used, complete = 0, whole
        for word, start, end in found:
            reach = len(normalized) - start if from_end else end
            if (
                not word  # the end of an overlong run read from the end: older text is not read
                or end - start > MAX_WORD_CHARS
                or reach > room * MAX_CHARS_PER_TOKEN
                or len(kept) >= room * MAX_WORDS_PER_TOKEN
            ):
                complete = False
                break
            ids = self._cached_ids(word) if len(word) <= CACHED_WORD_CHARS else self._ids(word)
            if used + len(ids) > room:
                complete = complete and not from_end and start >= len(text)
                break
            kept.append(ids)
            used += len(ids)
        if from_end:
            kept.reverse()
        return [token for ids in kept for token in ids], complete

    def _words_from_end(self, text: str) -> Iterator[tuple[str, int, int]]:
        """The words of ``text``, last first, each run of non-spaces split alone (no word crosses a
        space); of a run longer than ``MAX_WORD_CHARS``, only its tail's words, then an empty word."""
        for match in reversed(list(_RUN.finditer(text))):
            begin, end = match.span()
            cut = max(begin, end - MAX_WORD_CHARS)
            for word, start, stop in reversed(list(words(text[cut:end]))):
                yield word, cut + start, cut + stop
            if cut > begin:
                yield "", cut, cut
                return

    def _ids(self, word: str) -> tuple[int, ...]:
        return tuple(self._hf.convert_tokens_to_ids(self._hf.tokenize(word)))

    def close(self) -> None:
        del self._model
        release_unloaded()
