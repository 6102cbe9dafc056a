"""A decision request as GLiNER2.5-Decide reads it: classification tasks (a name, an optional prompt,
labels with optional descriptions), and the answers made of the model's label probabilities.

Three request shapes, the public server's, map onto tasks:

- ``output_schema``: Laya's typed questions (``sie.adapters.decide.typed_questions``), answered in
  ``data[question_id]``. The question id is the task, its instructions the prompt. A choice question's
  labels are its criteria (a described criterion describes its label); a score question's labels are
  its levels ``"0"``..``"k-1"``, each described by its criterion; a noul question's are ``"yes"`` and
  ``"no"`` (or its ``labels`` wording), described by ``criteria["true"]`` / ``["false"]``.
- ``options.label_groups`` (GLiClass's ``{group: [label, ...]}``): one task per group with the
  request's instruction as prompt, answered in ``data[group]`` and as ``"group.label"``
  classifications.
- ``labels``: one task, named ``options.classification_task`` (default ``"label"``), answered as
  classifications.

A single-label task is a softmax over its labels, a multi-label one (``classification_type``
``"multi-label"`` or ``multi_label``) a sigmoid per label, as the gliner2 library computes them.
Bounds (tasks, labels, characters) are checked before anything is tokenized, and the prompt's
structural tokens are refused in the caller's text. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np

from sie.adapters.decide.typed_questions import (
    MAX_QUESTIONS,
    Question,
    entropy_confidence,
    parse_questions,
    question_mapping,
    render_criterion,
    shown,
)
from sie.adapters.options import unit_option
from sie.core.extraction import Classification
from sie.core.task import Task, UnsupportedInput, thawed

Kind = Literal["choice", "score", "noul", "group", "labels"]
Mode = Literal["questions", "groups", "labels"]

FAMILY: Final = "GLiNER2.5-Decide"
MAX_TASKS: Final = MAX_QUESTIONS  # label groups a request, as many as questions
MAX_LABELS_PER_TASK: Final = 64  # the library's own cap on a task's candidates
MAX_LABELS: Final = 1024
MAX_NAME_CHARS: Final = 128  # a question id or group name
MAX_LABEL_CHARS: Final = 256
MAX_TEXT_CHARS: Final = 2048  # a prompt or one description
MAX_SCHEMA_CHARS: Final = 65_536  # every string of the task schema together
DEFAULT_TASK: Final = "label"
NOUL_WORDS: Final = ("no", "yes")  # (false, true)
MULTI_LABEL_CUTOFF: Final = 0.5  # a multi-label answer's labels when the request sets no threshold
# The structural tokens of the GLiNER2 prompt: in a name, label, prompt or description they would be
# read as structure. (A document cannot carry them: it is read as lowercased words.)
MARKERS: Final = (
    "[P]",
    "[L]",
    "[C]",
    "[E]",
    "[R]",
    "[DESCRIPTION]",
    "[EXAMPLE]",
    "[OUTPUT]",
    "[SEP_STRUCT]",
    "[SEP_TEXT]",
)
NO_TASK: Final = (
    f"{FAMILY} requires typed questions in output_schema ({{question_id: {{type, instructions, "
    "criteria}}), options.label_groups, or labels"
)


@dataclass(frozen=True, slots=True)
class DecisionTask:
    """One classification task: ``labels`` are what the model reads, ``keys`` how each is answered
    (the caller's label, a score level, a noul question's ``"true"``/``"false"``)."""

    key: str
    name: str
    kind: Kind
    labels: tuple[str, ...]
    keys: tuple[str, ...]
    descriptions: tuple[str | None, ...]
    prompt: str | None = None
    multi_label: bool = False
    legend: tuple[Any, ...] = ()

    def library_entry(self) -> dict[str, Any]:
        """This task as the gliner2 library's schema lists a classification."""
        entry: dict[str, Any] = {
            "task": self.name,
            "labels": list(self.labels),
            "true_label": ["N/A"],
            "multi_label": self.multi_label,
            "cls_threshold": 0.5,
            "class_act": "auto",
        }
        if self.prompt:
            entry["prompt"] = self.prompt
        described = {label: text for label, text in zip(self.labels, self.descriptions, strict=True) if text}
        if described:
            entry["label_descriptions"] = described
        return entry

    def free_texts(self) -> Iterator[str]:
        if self.prompt:
            yield self.prompt
        yield from (text for text in self.descriptions if text)


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    mode: Mode
    tasks: tuple[DecisionTask, ...]
    threshold: float = 0.0

    def library_schema(self) -> dict[str, Any]:
        """Every task as the library's schema dict (classifications only)."""
        return {
            "json_structures": [],
            "classifications": [task.library_entry() for task in self.tasks],
            "entities": {},
            "relations": [],
            "json_descriptions": {},
            "entity_descriptions": {},
        }

    @property
    def label_count(self) -> int:
        return sum(len(task.labels) for task in self.tasks)


def parse_request(task: Task | None) -> DecisionRequest:
    """The request's tasks, every bound checked."""
    task = task or Task()
    options = {name: thawed(value) for name, value in task.options}
    schema = thawed(task.output_schema)
    groups = options.get("label_groups")
    _refuse_other_encodings(options)
    if schema is not None:
        if task.labels:
            raise UnsupportedInput(
                f"{FAMILY} takes either output_schema (typed questions) or labels, not both"
            )
        if groups is not None:
            raise UnsupportedInput(
                f"{FAMILY} takes either output_schema (typed questions) or options.label_groups, not both"
            )
        if task.instruction is not None:
            raise UnsupportedInput(
                f"{FAMILY} reads each question's own 'instructions' from output_schema; the request's "
                "instruction applies only to labels and label_groups"
            )
        request = DecisionRequest("questions", _question_tasks(schema))
    else:
        prompt = _free_text(task.instruction, "instruction")
        multi_label = multi_label_option(options)
        threshold = unit_option(task, "threshold", 0.0, FAMILY)
        if groups is not None:
            if task.labels:
                raise UnsupportedInput(f"{FAMILY} takes either labels or options.label_groups, not both")
            request = DecisionRequest("groups", _group_tasks(groups, prompt, multi_label), threshold)
        elif task.labels:
            one = _labels_task(list(task.labels), options.get("classification_task"), prompt, multi_label)
            request = DecisionRequest("labels", (one,), threshold)
        else:
            raise UnsupportedInput(NO_TASK)
    _check_totals(request)
    return request


def _refuse_other_encodings(options: Mapping[str, Any]) -> None:
    encoding = options.get("group_encoding")
    if encoding is not None and encoding != "joint":
        raise UnsupportedInput(
            f"{FAMILY} scores every question and label group of an item in one encoder row "
            "(group_encoding 'joint'); other encodings are not supported"
        )
    if options.get("examples") is not None:
        raise UnsupportedInput(f"{FAMILY} does not take few-shot examples")


def _question_tasks(schema: Any) -> tuple[DecisionTask, ...]:
    schema = question_mapping(schema, FAMILY, NO_TASK)
    for qid, definition in schema.items():
        criteria = definition.get("criteria") if isinstance(definition, Mapping) else None
        if (
            isinstance(definition, Mapping)
            and definition.get("type") != "noul"
            and isinstance(criteria, Mapping | list)
            and len(criteria) > MAX_LABELS_PER_TASK
        ):
            raise UnsupportedInput(
                f"question {shown(qid)}: {FAMILY} accepts at most {MAX_LABELS_PER_TASK} options per "
                f"question, got {len(criteria)}"
            )
    tasks = tuple(_question_task(question) for question in parse_questions(schema))
    _check_unique_names(tasks)
    return tasks


def _question_task(question: Question) -> DecisionTask:
    where = f"question {shown(question.qid)}"
    name = _name(question.qid, f"{where}: the question id", MAX_NAME_CHARS)
    prompt = _free_text(question.instructions, f"{where}: instructions")
    if question.qtype == "choice":
        criteria: dict[str, Any] = question.criteria
        return DecisionTask(
            question.qid,
            name,
            "choice",
            _labels(list(criteria), where),
            tuple(criteria),
            tuple(_description(value, where) for value in criteria.values()),
            prompt,
        )
    if question.qtype == "score":
        levels: list[Any] = question.criteria
        labels = tuple(str(index) for index in range(len(levels)))
        descriptions = tuple(
            None if _repeats(level, label) else _description(level, where)
            for label, level in zip(labels, levels, strict=True)
        )
        return DecisionTask(
            question.qid, name, "score", labels, labels, descriptions, prompt, legend=tuple(levels)
        )
    false_word, true_word = question.wording or NOUL_WORDS
    criteria = question.criteria or {}
    return DecisionTask(
        question.qid,
        name,
        "noul",
        _labels([true_word, false_word], where),
        ("true", "false"),
        (_description(criteria.get("true"), where), _description(criteria.get("false"), where)),
        prompt,
    )


def _repeats(level: Any, label: str) -> bool:
    """A score level that only says its own index needs no description."""
    return level in (None, "") or (isinstance(level, str) and level.strip() == label)


def _group_tasks(groups: Any, prompt: str | None, multi_label: bool) -> tuple[DecisionTask, ...]:
    if not isinstance(groups, Mapping) or not groups:
        raise UnsupportedInput(
            f"{FAMILY} label_groups must be a non-empty object mapping group names to label lists"
        )
    if len(groups) > MAX_TASKS:
        raise UnsupportedInput(
            f"{FAMILY} accepts at most {MAX_TASKS} label groups per request, got {len(groups)}"
        )
    tasks = []
    for group, labels in groups.items():
        where = f"label_groups[{shown(group)}]"
        name = _name(group, f"{where}: the group name", MAX_NAME_CHARS)
        if not isinstance(labels, list) or not labels:
            raise UnsupportedInput(f"{FAMILY} {where} must be a non-empty list of labels")
        if len(labels) > MAX_LABELS_PER_TASK:
            raise UnsupportedInput(
                f"{FAMILY} {where} may have at most {MAX_LABELS_PER_TASK} labels, got {len(labels)}"
            )
        read = _labels(labels, where)
        tasks.append(
            DecisionTask(group, name, "group", read, tuple(labels), (None,) * len(read), prompt, multi_label)
        )
    _check_unique_names(tasks)
    return tuple(tasks)


def _labels_task(labels: list[str], task_name: Any, prompt: str | None, multi_label: bool) -> DecisionTask:
    if len(labels) > MAX_LABELS_PER_TASK:
        raise UnsupportedInput(
            f"{FAMILY} accepts at most {MAX_LABELS_PER_TASK} labels per task, got {len(labels)}"
        )
    name = DEFAULT_TASK if task_name is None else _name(task_name, "classification_task", MAX_NAME_CHARS)
    read = _labels(labels, "labels")
    return DecisionTask(name, name, "labels", read, tuple(labels), (None,) * len(read), prompt, multi_label)


def _labels(values: Sequence[Any], where: str) -> tuple[str, ...]:
    labels = tuple(_name(value, f"{where}: a label", MAX_LABEL_CHARS) for value in values)
    if len(set(labels)) != len(labels):
        raise UnsupportedInput(
            f"{FAMILY} {where}: labels must be unique once surrounding whitespace is removed"
        )
    return labels


def _check_unique_names(tasks: Sequence[DecisionTask]) -> None:
    names = [task.name for task in tasks]
    if len(set(names)) != len(names):
        raise UnsupportedInput(
            f"{FAMILY} question ids and label group names must be unique once surrounding whitespace is removed"
        )


def _name(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UnsupportedInput(f"{FAMILY} {what} must be a non-empty string")
    if len(value) > limit:
        raise UnsupportedInput(f"{FAMILY} {what} may have at most {limit} characters, got {len(value)}")
    _refuse_markers(value, what)
    return value.strip()


def _free_text(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise UnsupportedInput(f"{FAMILY} {what} must be a string")
    if len(value) > MAX_TEXT_CHARS:
        raise UnsupportedInput(
            f"{FAMILY} {what} may have at most {MAX_TEXT_CHARS} characters, got {len(value)}"
        )
    _refuse_markers(value, what)
    return value.strip() or None


def _description(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    try:
        text = render_criterion(value)
    except (TypeError, ValueError) as exc:
        raise UnsupportedInput(
            f"{FAMILY} {where}: a criterion must be a string or JSON-serializable"
        ) from exc
    return _free_text(text, f"{where}: a criterion")


def _refuse_markers(value: str, what: str) -> None:
    for marker in MARKERS:
        if marker in value:
            raise UnsupportedInput(
                f"{FAMILY} {what} may not contain {marker!r}, a structural token of the model's prompt"
            )


def _check_totals(request: DecisionRequest) -> None:
    if request.label_count > MAX_LABELS:
        raise UnsupportedInput(
            f"{FAMILY} accepts at most {MAX_LABELS} labels or answer options per request, got {request.label_count}"
        )
    chars = sum(
        len(task.name) + sum(map(len, task.labels)) + sum(map(len, task.free_texts()))
        for task in request.tasks
    )
    if chars > MAX_SCHEMA_CHARS:
        raise UnsupportedInput(
            f"{FAMILY} questions, labels, prompts and descriptions may total at most {MAX_SCHEMA_CHARS} "
            f"characters, got {chars}"
        )


def multi_label_option(options: Mapping[str, Any]) -> bool:
    """``classification_type`` (GLiClass's word) or ``multi_label`` (GLiNER2's); single-label by default."""
    kind, multi = options.get("classification_type"), options.get("multi_label")
    if multi is not None and not isinstance(multi, bool):
        raise UnsupportedInput(f"{FAMILY} multi_label must be a boolean")
    if kind is None:
        return bool(multi)
    if kind not in ("single-label", "multi-label"):
        raise UnsupportedInput(f"{FAMILY} classification_type must be 'single-label' or 'multi-label'")
    if multi is not None and multi != (kind == "multi-label"):
        raise UnsupportedInput(f"{FAMILY} multi_label contradicts classification_type")
    return bool(kind == "multi-label")


def probabilities(task: DecisionTask, logits: np.ndarray) -> np.ndarray:
    """A single-label task's softmax or a multi-label task's sigmoids, in float64."""
    z = np.asarray(logits, dtype=np.float64)
    if task.multi_label:
        return np.asarray(np.exp(-np.logaddexp(0.0, -z)))
    e = np.exp(z - z.max())
    return np.asarray(e / e.sum())


def answer(task: DecisionTask, p: np.ndarray, threshold: float) -> dict[str, Any]:
    """One task's answer, shaped as Laya answers a question and GLiClass a label group."""
    named = {key: float(value) for key, value in zip(task.keys, p, strict=True)}
    if task.kind == "score":
        return {
            "type": "score",
            "score": float(np.dot(np.arange(len(p), dtype=np.float64), p)),
            "legend": {str(index): level for index, level in enumerate(task.legend)},
            "probabilities": named,
            "confidence": entropy_confidence(p),
        }
    if task.kind == "noul":
        true = float(p[0])
        return {
            "type": "noul",
            "noul": true,
            "answer": true > float(p[1]),
            "confidence": max(true, 1.0 - true),
        }
    if task.multi_label:
        cutoff = threshold if threshold > 0.0 else MULTI_LABEL_CUTOFF
        return {"labels": [key for key, value in named.items() if value >= cutoff], "probabilities": named}
    return {
        "type": "choice",
        "choice": task.keys[int(np.argmax(p))],
        "probabilities": named,
        "confidence": entropy_confidence(p),
    }


def classifications(request: DecisionRequest, per_task: Sequence[np.ndarray]) -> list[Classification]:
    """Every label at or above the request's threshold, best first; a label group's as ``group.label``."""
    grouped = request.mode == "groups"
    found = [
        Classification(f"{task.key}.{key}" if grouped else key, float(value))
        for task, p in zip(request.tasks, per_task, strict=True)
        for key, value in zip(task.keys, p, strict=True)
        if float(value) >= request.threshold
    ]
    return sorted(found, key=lambda one: -one.score)


def per_task(request: DecisionRequest, logits: np.ndarray) -> list[np.ndarray]:
    """A row's label logits as each task's probabilities (a task's labels are consecutive)."""
    out, start = [], 0
    for task in request.tasks:
        out.append(probabilities(task, logits[start : start + len(task.labels)]))
        start += len(task.labels)
    return out
