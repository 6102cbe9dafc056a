"""Laya's typed questions, as the public server's decision models read them from ``output_schema``:
``{question_id: {"type", "instructions", "criteria", "labels"?}}``.

- ``choice``: ``criteria`` maps each label to its description, or lists the labels;
- ``score``: ``criteria`` lists the levels' descriptions, level 0 first;
- ``noul`` (a yes/no question): ``criteria`` may describe ``"true"`` and ``"false"``, and ``labels``
  may word the two answers (``{"false": ..., "true": ...}``).

The checks and their order are Laya's, so a question the public server refuses is refused here too;
an items's state (``metadata.state``) is rendered as Laya renders it (a string as is, anything else
as JSON). Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from sie.core.task import UnsupportedInput

QUESTION_TYPES: Final = ("choice", "score", "noul")
MAX_QUESTIONS: Final = 64  # a request's, as the public decision models bound them
# UTF-8 bytes of a state kept per token a row has room for: these tokenizers make at most one token
# per byte, so a state cut there still gives every token the row can hold.
STATE_BYTES_PER_TOKEN: Final = 32
# Caller data quoted in an error message is cut to this many characters.
SHOWN_CHARS: Final = 64
DEFAULT_NOUL_WORDING: Final = {"false": "false", "true": "true"}
NOUL_WORDING_ERROR: Final = "noul labels must map exactly 'false' and 'true' to distinct non-empty strings"


@dataclass(frozen=True, slots=True)
class Question:
    """One checked question: ``criteria`` is a label -> description dict (choice), a list of level
    descriptions (score), or an optional ``"true"``/``"false"`` dict (noul)."""

    qid: str
    qtype: str
    instructions: str
    criteria: Any
    wording: tuple[str, str] | None = None  # a noul question's (false, true) answers, when given


def shown(value: Any) -> str:
    """Caller data for an error message: a string or a scalar's repr, cut to ``SHOWN_CHARS``."""
    if isinstance(value, str):
        text = repr(value[: SHOWN_CHARS + 1])
    elif value is None or isinstance(value, bool | int | float):
        try:
            text = repr(value)
        except ValueError:  # an integer past str()'s digit limit
            return f"<{type(value).__name__}>"
    else:
        return f"<{type(value).__name__}>"
    return text if len(text) <= SHOWN_CHARS + 2 else text[:SHOWN_CHARS] + "..."


def noul_wording(labels: Any) -> tuple[str, str]:
    """A noul question's (false, true) answer wording."""
    if not isinstance(labels, Mapping) or set(labels) != {"false", "true"}:
        raise UnsupportedInput(NOUL_WORDING_ERROR)
    false, true = labels["false"], labels["true"]
    if not isinstance(false, str) or not isinstance(true, str):
        raise UnsupportedInput(NOUL_WORDING_ERROR)
    false, true = false.strip(), true.strip()
    if not false or not true or false == true:
        raise UnsupportedInput(NOUL_WORDING_ERROR)
    return false, true


def _noul_key(key: Any) -> str | None:
    """A noul criteria key as Laya reads it (lowercased text), without rendering a long key."""
    if isinstance(key, str):
        return key.lower() if len(key) <= len("false") else None
    if key is None or isinstance(key, bool | int | float):
        return str(key).lower()
    return None


def _checked(qid: Any, definition: Any) -> None:
    where = f"question {shown(qid)}"
    if not isinstance(definition, Mapping):
        raise UnsupportedInput(f"{where}: definition must be a dict, got {type(definition).__name__}")
    qtype = definition.get("type")
    if not isinstance(qtype, str) or qtype not in QUESTION_TYPES:
        raise UnsupportedInput(f"{where}: unknown type {shown(qtype)}; use one of {sorted(QUESTION_TYPES)}")
    if "instructions" not in definition:
        raise UnsupportedInput(f"{where}: no 'instructions'; add the text the model should answer")
    criteria = definition.get("criteria")
    if qtype == "choice":
        if not isinstance(criteria, Mapping | list):
            raise UnsupportedInput(
                f"{where}: a choice question takes 'criteria' as a dict of label -> description, "
                "or a list of labels"
            )
        if not criteria:
            raise UnsupportedInput(f"{where}: a choice question needs at least one criterion")
        if any(not isinstance(label, str) for label in criteria):
            raise UnsupportedInput(f"{where}: a choice question's labels must be strings")
    elif qtype == "score":
        if not isinstance(criteria, list):
            raise UnsupportedInput(
                f"{where}: a score question takes 'criteria' as a list of level descriptions, index 0 first"
            )
        if not criteria:
            raise UnsupportedInput(f"{where}: a score question needs at least one level")
    elif criteria is not None and not isinstance(criteria, Mapping):
        raise UnsupportedInput(
            f"{where}: a noul question takes 'criteria' as a dict with optional 'true'/'false' "
            "descriptions, or omits it"
        )
    elif isinstance(criteria, Mapping) and (
        len(criteria) > 2 or any(_noul_key(key) not in ("true", "false") for key in criteria)
    ):
        raise UnsupportedInput(
            f"{where}: a noul question's 'criteria' are keyed only 'true' and 'false' (either, both, or "
            "omitted); word the answers differently with 'labels'"
        )
    if "labels" in definition:
        if qtype != "noul":
            raise UnsupportedInput(f"{where}: 'labels' is only supported for noul questions")
        try:
            if definition["labels"] is not None:  # null is the default wording, as Laya reads it
                noul_wording(definition["labels"])
        except UnsupportedInput as exc:
            raise UnsupportedInput(f"{where}: {exc}") from exc


def _question(qid: str, definition: Mapping[str, Any]) -> Question:
    qtype = definition["type"]
    criteria: Any = definition.get("criteria")
    if qtype == "choice":
        criteria = dict.fromkeys(criteria) if isinstance(criteria, list) else dict(criteria)
    elif qtype == "noul" and isinstance(criteria, Mapping):
        criteria = {str(key).lower(): value for key, value in criteria.items()}
    instructions = definition["instructions"]
    if not isinstance(instructions, str):
        try:
            instructions = json.dumps(instructions, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise UnsupportedInput(
                f"question {shown(qid)}: 'instructions' must be a string or JSON-serializable"
            ) from exc
    wording = noul_wording(definition["labels"]) if definition.get("labels") is not None else None
    return Question(qid, qtype, instructions, criteria, wording)


def parse_questions(questions: Any) -> list[Question]:
    """Every question, checked, in the client's order."""
    if not isinstance(questions, Mapping):
        raise UnsupportedInput("typed questions (output_schema) must map question ids to definitions")
    parsed = []
    for qid, definition in questions.items():
        _checked(qid, definition)
        parsed.append(_question(qid, definition))
    return parsed


def question_mapping(schema: Any, family: str, none_sent: str) -> Mapping[str, Any]:
    """A request's ``output_schema`` as a family reading typed questions takes it, bounded before
    any question is read: a mapping of at most ``MAX_QUESTIONS`` questions (``none_sent`` when empty)."""
    if not isinstance(schema, Mapping):
        raise UnsupportedInput(f"{family} output_schema must map question ids to question definitions")
    if not schema:
        raise UnsupportedInput(none_sent)
    if len(schema) > MAX_QUESTIONS:
        raise UnsupportedInput(
            f"{family} accepts at most {MAX_QUESTIONS} questions per request, got {len(schema)}"
        )
    return schema


def render_criterion(value: Any) -> str:
    """A criterion as the model reads it: a string as is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def entropy_confidence(p: np.ndarray) -> float:
    """Laya's confidence of a distribution over ``k`` answers: 1 - H(p) / log(k)."""
    k = len(p)
    if k < 2:
        return 1.0
    entropy = -float((p * np.log(np.clip(p, 1e-12, 1.0))).sum())
    return float(np.clip(1.0 - entropy / math.log(k), 0.0, 1.0))


def rendered_state(state: str | Mapping[str, Any] | Sequence[Any], limit: int, *, from_end: bool) -> str:
    """A state as the encoder reads it (a string as is, else JSON), only its first (``from_end``:
    last) ``limit`` UTF-8 bytes, cut at a character."""
    text = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    cut = data[len(data) - limit :] if from_end else data[:limit]
    return cut.decode("utf-8", "ignore")
