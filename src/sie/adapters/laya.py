"""Laya typed decisions (``convaiinnovations/laya``, ``laya-multilingual``, ``laya-typed-decisions``):
a ModernBERT encoder under a decision head reads one row per (state, question) and scores each
answer option at its marker.

The ``laya`` library owns the model: ``laya.load`` reads the checkpoint (``rl_agent_config.json``,
``model.safetensors``, ``tokenizer/``, ``encoder/``), its ``Agent`` builds every row (the question's
head, its options' ``[MASK]`` markers, the state cut to the row, from the left for a conversation)
and runs the forward, so rows and logits are the library's. The answers are the public server's:
each question's option logits over its calibration temperature (the checkpoint's, per question type
and option count, clamped to 0.5..5 as the library clamps them), a softmax, and

- ``choice``: ``{type, choice, probabilities, confidence}``;
- ``score``: ``{type, score (the expected level), legend, probabilities, confidence}``;
- ``noul``: ``{type, noul (the probability of true), answer, confidence (max(p, 1 - p))}``;

``confidence`` of a choice or score being ``1 - H(p)/log k``. Unlike the library's own answers they
are not rounded and carry no ``answer_confidence`` or ``action``.

A request is Laya's typed questions in ``output_schema`` (answered in ``data[question_id]``), or
``labels`` (with ``instruction`` as the question, "Which category does this text belong to?" by
default) answered as one choice question, every label's probability in ``classifications`` at or
above ``options.threshold``. An item is a text, or a state in ``metadata.state`` (a string, an
object read as its JSON, or a list of turns of which the newest are kept). ``options.max_len`` (up
to the model's) and ``head_max_len`` set a row's budgets; an item's rows may hold at most 32,768
tokens (questions x ``max_len``), 64 questions and 1,024 options a request.

A state too long for a row is cut to it, as the library cuts it (a conversation keeps its newest
turns); under ``options.overflow_policy: error`` that item is refused instead (``INPUT_TOO_LONG``, its
longest row's whole length against ``max_len``: "at least" when the state was too large to tokenize
whole, see ``_state``).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import laya
import numpy as np
import torch
from laya.common import QTYPES, build_sequence, collate_items, encode_text, temp_bucket
from tokenizers import Tokenizer

from sie.adapters.batch import AnnotatedText, BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import TEXT_ONLY, Forward, LoadSpec, Trait
from sie.adapters.decide.typed_questions import (
    STATE_BYTES_PER_TOKEN,
    Question,
    entropy_confidence,
    parse_questions,
    question_mapping,
    rendered_state,
)
from sie.adapters.options import eager_cuda_graphs, integer_option, unit_option
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import release_unloaded
from sie.adapters.runtime.window import refusal
from sie.catalog.families import LAYA_OPTIONS
from sie.core.extraction import Classification, Extraction
from sie.core.options import Capability, ComputePrecision
from sie.core.task import ItemRefused, Task, UnsupportedInput, thawed
from sie.wire.errors import ErrorCode

log = logging.getLogger(__name__)

FAMILY: Final = "Laya"
MAX_OPTIONS: Final = 1024
MAX_ITEM_TOKENS: Final = 32_768
LABELS_QUESTION: Final = "label"
LABELS_INSTRUCTION: Final = "Which category does this text belong to?"
NO_QUESTIONS: Final = (
    "Laya requires typed questions in output_schema ({question_id: {type, instructions, criteria}}) or labels"
)
ITEM_ERROR: Final = (
    "Laya items need a text, or metadata.state holding a string, a JSON object, or a list of turns"
)
_HALF: Final = {ComputePrecision.FLOAT16: torch.float16, ComputePrecision.BFLOAT16: torch.bfloat16}


@dataclass(frozen=True, slots=True)
class Request:
    """A request's questions, the library's form of each, and how they are answered."""

    questions: list[Question]
    definitions: dict[str, Any]  # question id -> the library's internal form
    labels: list[str] | None  # the caller's labels in labels mode
    threshold: float
    max_len: int
    head_max_len: int


@dataclass(frozen=True, slots=True)
class Rows:
    request: Request
    items: list[dict[str, Any]]  # one state's rows, one per question, as the library collates them


class LayaDecider:
    family = FAMILY
    request_options = LAYA_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = TEXT_ONLY
    packs_tokens = False
    traits = frozenset({Trait.READS_ITEM_METADATA, Trait.READS_ITEM_STATE})

    def __init__(self, agent: Any, max_len: int) -> None:
        self._agent = agent
        self._max_len = max_len
        self._head_max_len = int(agent.cfg.get("head_max_len", 192))
        self._pad = int(agent.tok.pad_token_id or 0)
        self.tokenizer = TextTokenizer(Tokenizer.from_str(agent.tok.backend_tokenizer.to_str()), max_len)
        self._lock = threading.Lock()  # the library's tokenizer, shared by the preparing threads

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        eager_cuda_graphs(spec.loadtime, FAMILY)
        with warnings.catch_warnings(record=True) as said:  # the library warns of clamped temperatures
            warnings.simplefilter("always")
            agent = laya.load(str(spec.weights), device=spec.device)
        for warning in said:
            log.warning("%s %s: %s", FAMILY, spec.weights, warning.message)
        if agent.device.type != torch.device(spec.device).type:  # the library falls back to the CPU
            raise RuntimeError(
                f"{FAMILY} could not be placed on {spec.device} (the library chose {agent.device})"
            )
        # The library autocasts on a GPU; a CPU runs float32, and so does float32 anywhere.
        half = _HALF.get(spec.precision) if not spec.device.startswith("cpu") else None
        agent.amp_enabled = half is not None
        agent.dtype = half or torch.float32
        trained = int(agent.cfg.get("max_len", 512))
        max_len = min(trained, spec.max_seq_length) if spec.max_seq_length else trained
        return cls(agent, max_len)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        request = self._request(forward)
        prepared = []
        for one in inputs:
            try:
                text, newest = self._state(one)
            except ItemRefused as exc:  # this item alone: the request's others are answered
                prepared.append(Prepared.refused(exc.error))
                continue
            try:
                with self._lock:
                    items, whole = self._rows(request, text, newest)
            except (TypeError, ValueError) as exc:  # criteria the library cannot render
                raise UnsupportedInput(f"{FAMILY}: {exc}") from exc
            # A state rendered up to its byte bound may have been cut there: its count is a lower bound.
            bounded = len(text.encode("utf-8", "surrogatepass")) >= self._max_len * STATE_BYTES_PER_TOKEN - 3
            if refused := refusal(forward, whole, request.max_len, at_least=bounded):
                prepared.append(Prepared.refused(refused))
                continue
            weight = sum(len(item["ids"]) for item in items)  # every row is encoded, and metered
            prepared.append(Prepared(payload=Rows(request, items), weight=weight))
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        states: list[Rows] = [item.payload for item in batch]
        logits = self._logits(collate_items([rows.items for rows in states], self._pad))
        extractions, offset = [], 0
        for rows in states:
            request = rows.request
            answers, found = {}, []
            for index, (question, item) in enumerate(zip(request.questions, rows.items, strict=True)):
                p = self._probabilities(question, logits[offset + index, : len(item["markers"])])
                if request.labels is not None:
                    found = _classifications(request.labels, p, request.threshold)
                else:
                    answers[question.qid] = _answer(question, p)
            offset += len(rows.items)
            extractions.append(Extraction(classifications=found, data=answers))
        return BatchOutputs(extractions=extractions)

    def _state(self, one: ModelInput) -> tuple[str, bool]:
        """An item's state as the text its rows read, and whether its newest (last) part is kept.
        Only the first (a conversation's last) ``STATE_BYTES_PER_TOKEN`` bytes per token of the
        model's window are kept, as the public server cuts them, so a huge state costs no more to
        tokenize than a full row (these tokenizers make at most one token per byte)."""
        limit = self._max_len * STATE_BYTES_PER_TOKEN
        if isinstance(one, str):
            return rendered_state(one, limit, from_end=False), False
        if not isinstance(one, AnnotatedText):
            raise UnsupportedInput(f"{FAMILY} models take text, not images or pairs")
        if "state" not in one.metadata:
            return rendered_state(one.text, limit, from_end=False), False
        state = one.metadata["state"]
        if one.text or not isinstance(state, str | Mapping | list):
            raise ItemRefused(ErrorCode.INVALID_INPUT.value, ITEM_ERROR)
        newest = isinstance(state, list)  # chronological turns
        try:
            return rendered_state(state, limit, from_end=newest), newest
        except (TypeError, ValueError, RecursionError) as exc:
            raise ItemRefused(
                ErrorCode.INVALID_INPUT.value, f"{FAMILY} metadata.state must be JSON-serializable"
            ) from exc

    def _rows(self, request: Request, text: str, newest: bool) -> tuple[list[dict[str, Any]], int]:
        """One state's rows as the library's ``Agent`` builds them: the state tokenized once, then
        per question its head, its options' markers and the state cut to what is left; and the
        longest row's length had its state not been cut."""
        tok = self._agent.tok
        state_ids = encode_text(tok, text.replace(tok.mask_token, " "), add_special_tokens=False)["input_ids"]
        rows, whole = [], 0
        for question in request.questions:
            ids, markers, stats, clamp, *layout = build_sequence(
                tok,
                text,
                request.definitions[question.qid],
                request.max_len,
                request.head_max_len,
                truncate_left=newest,
                state_ids=state_ids,
                return_stats=True,
                return_truncation_stats=True,
                return_layout=self._agent.parallel_options,
            )
            whole = max(whole, len(ids) + int(clamp["state_tokens_dropped"]))
            if len(markers) != stats["options"]:
                raise UnsupportedInput(
                    f"{FAMILY} question {question.qid!r}: only {len(markers)} of its {stats['options']} options "
                    f"fit in max_len={request.max_len} with head_max_len={request.head_max_len}; lower "
                    "head_max_len, raise max_len, or send fewer options"
                )
            row: dict[str, Any] = {"ids": ids, "markers": markers, "qtype": QTYPES[question.qtype]}
            if layout:
                row["layout"] = layout[0]
            rows.append(row)
        return rows, whole

    def _logits(self, batch: dict[str, torch.Tensor]) -> np.ndarray:
        """Every row's option logits: the library's model under its autocast, on the device. (The
        library's own forward retries an out-of-memory batch on the CPU, hidden from the engine,
        which frees memory and splits the batch itself.)"""
        agent = self._agent
        device = agent.device
        moved = {key: value.to(device) for key, value in batch.items() if isinstance(value, torch.Tensor)}
        layout = (
            {"position_ids": moved["position_ids"], "option_ids": moved["option_ids"]}
            if "option_ids" in moved
            else {}
        )
        with (
            torch.inference_mode(),
            torch.autocast(device.type, dtype=agent.dtype, enabled=agent.amp_enabled),
        ):
            logits, _ = agent.model(
                moved["input_ids"],
                moved["attention_mask"],
                moved["marker_pos"],
                moved["marker_mask"],
                moved["qtype"],
                **layout,
            )
        return np.asarray(logits.float().cpu().numpy())

    def _probabilities(self, question: Question, raw: np.ndarray) -> np.ndarray:
        """The calibrated softmax over a question's options (float32, as the library computes it)."""
        qtype = QTYPES[question.qtype]
        scale = self._agent.temperature_by_options.get(
            temp_bucket(qtype, len(raw)), self._agent.temperature[qtype]
        )
        z = np.asarray(raw, dtype=np.float32) / scale
        p = np.exp(z - z.max())
        return np.asarray(p / p.sum())

    def _request(self, forward: Forward) -> Request:
        task = forward.task
        schema = thawed(task.output_schema) if task else None
        labels = list(task.labels) if task and task.labels else None
        instruction = task.instruction if task else None
        if schema is not None:
            if labels:
                raise UnsupportedInput(
                    f"{FAMILY} takes either output_schema (typed questions) or labels, not both"
                )
            if instruction is not None:
                raise UnsupportedInput(
                    f"{FAMILY} reads each question's own 'instructions' from output_schema; "
                    "the request's instruction applies only to labels"
                )
            definitions = _schema(schema)
            caller_labels = None
        elif labels:
            if len(labels) > MAX_OPTIONS:
                raise UnsupportedInput(
                    f"{FAMILY} accepts at most {MAX_OPTIONS} labels per request, got {len(labels)}"
                )
            if any(not isinstance(label, str) or not label.strip() for label in labels):
                raise UnsupportedInput(f"{FAMILY} labels must be non-empty strings")
            read = [label.strip() for label in labels]
            if len(set(read)) != len(read):
                raise UnsupportedInput(f"{FAMILY} labels must be unique")
            question = instruction if instruction is not None else LABELS_INSTRUCTION
            definitions = {LABELS_QUESTION: {"type": "choice", "instructions": question, "criteria": read}}
            caller_labels = labels
        else:
            raise UnsupportedInput(NO_QUESTIONS)
        questions = parse_questions(definitions)
        max_len, head_max_len = self._budget(task)
        if len(questions) * max_len > MAX_ITEM_TOKENS:
            raise UnsupportedInput(
                f"{FAMILY} encodes each item once per question, up to max_len={max_len} tokens per row, and "
                f"accepts at most {MAX_ITEM_TOKENS} tokens per item: send at most {MAX_ITEM_TOKENS // max_len} "
                f"questions, or a smaller max_len option (got {len(questions)} questions)"
            )
        internal = {question.qid: _internal(question) for question in questions}
        threshold = unit_option(task, "threshold", 0.0, FAMILY) if caller_labels is not None else 0.0
        return Request(questions, internal, caller_labels, threshold, max_len, head_max_len)

    def _budget(self, task: Task | None) -> tuple[int, int]:
        """``max_len`` and ``head_max_len`` of a request (null is the model's own, as the public
        server reads them)."""
        max_len = (
            integer_option(task, "max_len", self._max_len, FAMILY) if _set(task, "max_len") else self._max_len
        )
        if max_len > self._max_len:
            raise UnsupportedInput(
                f"{FAMILY} max_len must be at most {self._max_len} for this model, got {max_len}"
            )
        if not _set(task, "head_max_len"):
            return max_len, self._head_max_len
        head_max_len = integer_option(task, "head_max_len", self._head_max_len, FAMILY)
        if head_max_len > max_len:
            raise UnsupportedInput(
                f"{FAMILY} head_max_len must be at most max_len ({max_len}), got {head_max_len}"
            )
        return max_len, head_max_len

    def close(self) -> None:
        del self._agent
        release_unloaded()


def _set(task: Task | None, name: str) -> bool:
    return task is not None and task.option(name, None) is not None


def _schema(schema: Any) -> dict[str, Any]:
    schema = question_mapping(schema, FAMILY, NO_QUESTIONS)
    declared = sum(_declared_options(definition) for definition in schema.values())
    if declared > MAX_OPTIONS:
        raise UnsupportedInput(
            f"{FAMILY} accepts at most {MAX_OPTIONS} answer options per request, got {declared}"
        )
    return dict(schema)


def _declared_options(definition: Any) -> int:
    if not isinstance(definition, Mapping):
        return 0
    if definition.get("type") == "noul":
        return 2
    criteria = definition.get("criteria")
    return len(criteria) if isinstance(criteria, Mapping | list) else 0


def _internal(question: Question) -> dict[str, Any]:
    """A checked question in the library's internal form (what its ``Agent`` makes of one; a
    caller's ``option_order`` is not read, as the public server does not read it)."""
    internal: dict[str, Any] = {"t": question.qtype, "ins": question.instructions, "crit": question.criteria}
    if question.wording is not None:
        internal["labels"] = {"false": question.wording[0], "true": question.wording[1]}
    return internal


def _answer(question: Question, p: np.ndarray) -> dict[str, Any]:
    k = len(p)
    if question.qtype == "choice":
        keys = list(question.criteria)
        return {
            "type": "choice",
            "choice": keys[int(p.argmax())],
            "probabilities": {key: float(v) for key, v in zip(keys, p, strict=True)},
            "confidence": entropy_confidence(p),
        }
    if question.qtype == "score":
        return {
            "type": "score",
            "score": float((np.arange(k) * p).sum()),
            "legend": {str(i): level for i, level in enumerate(question.criteria)},
            "probabilities": {str(i): float(v) for i, v in enumerate(p)},
            "confidence": entropy_confidence(p),
        }
    true = float(p[1])  # options are (false, true)
    return {"type": "noul", "noul": true, "answer": bool(p[1] > p[0]), "confidence": max(true, 1.0 - true)}


def _classifications(labels: list[str], p: np.ndarray, threshold: float) -> list[Classification]:
    found = [
        Classification(label, float(v)) for label, v in zip(labels, p, strict=True) if float(v) >= threshold
    ]
    return sorted(found, key=lambda one: -one.score)
