"""Token-classification NER, runtime-independent: each token's label and score become character spans.

The torch and ONNX Runtime adapters differ only in how they get the logits; both prepare items here
and aggregate here, so they cannot drift apart. The aggregation is transformers'
``pipeline("token-classification", aggregation_strategy="simple")``: every non-special token takes its
most likely label; adjacent tokens of one entity type join unless the later one starts a new entity
(``B-``); a group's score is the mean of its tokens' scores and ``O`` groups are dropped. Labels
without a ``B-``/``I-`` prefix (IO tagging) join while they repeat. Spans are the tokenizer's character
offsets, so ``text[start:end]`` is the entity's text exactly, whatever the tokenizer's normalisation.

Request options: ``labels`` keeps only those entity types (optional); ``threshold`` (default 0.0, so
every entity the pipeline gives is kept) drops entities scoring below it; ``merge_adjacent_entities``
(default false, the pipeline's behaviour) joins neighbouring entities of one type that only whitespace
separates, for models that tag every token ``B-`` (an e-mail address then comes back whole, not as
seven pieces), the score being the mean over all their tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from sie.adapters.batch import ModelInput, Prepared
from sie.adapters.contract import Forward, texts_only
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.window import refusals, within_window
from sie.catalog.families import TOKEN_ENTITY_OPTIONS
from sie.core.extraction import Entity, Extraction
from sie.core.task import Task, UnsupportedInput

FAMILY: Final = "TokenClassification"
DEFAULT_THRESHOLD: Final = 0.0
# The request options the token-classification families read (``threshold`` and ``merge_adjacent_entities`` below).
OPTIONS: Final = TOKEN_ENTITY_OPTIONS
_OUTSIDE: Final = "O"


@dataclass(frozen=True, slots=True)
class TextSpans:
    """What aggregation needs besides the logits: the text, each token's span and special flag."""

    text: str
    offsets: np.ndarray  # [tokens, 2]
    special: np.ndarray  # [tokens] bool


def id2label(config_file: Path) -> list[str]:
    """The model's labels by class index, from its ``config.json`` (what the pipeline reads)."""
    config = json.loads(config_file.read_text())
    mapping = {int(index): str(label) for index, label in config.get("id2label", {}).items()}
    if not mapping or sorted(mapping) != list(range(len(mapping))):
        raise ValueError(f"{config_file} has no usable id2label (one label per class index)")
    return [mapping[i] for i in range(len(mapping))]


def prepare(tokenizer: TextTokenizer, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
    """Ids plus the spans aggregation needs; bad options are refused here, before the items queue. A
    text past the window is read as far as it fits, or fails alone under ``overflow_policy: error``."""
    threshold(forward.task)
    merge_adjacent(forward.task)
    texts = texts_only(inputs, FAMILY)
    prepared = [
        Prepared(spans.ids, payload=TextSpans(text, spans.offsets, spans.special))
        for text, spans in zip(texts, tokenizer.encode_spans(texts), strict=True)
    ]
    return within_window(prepared, refusals(tokenizer, texts, forward))


def threshold(task: Task | None) -> float:
    value = task.option("threshold", DEFAULT_THRESHOLD) if task else DEFAULT_THRESHOLD
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UnsupportedInput(f"option 'threshold' must be a number, got {value!r}")
    return float(value)


def merge_adjacent(task: Task | None) -> bool:
    value = task.option("merge_adjacent_entities", False) if task else False
    if not isinstance(value, bool):
        raise UnsupportedInput(f"option 'merge_adjacent_entities' must be true or false, got {value!r}")
    return value


def _tag(label: str) -> tuple[bool, str]:
    """(starts a new entity, entity type) of a label, as the pipeline reads BIO prefixes."""
    if label.startswith("B-"):
        return True, label[2:]
    if label.startswith("I-"):
        return False, label[2:]
    return False, label


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probabilities: np.ndarray = shifted / shifted.sum(axis=-1, keepdims=True)
    return probabilities


def _groups(spans: TextSpans, best: np.ndarray, labels: Sequence[str]) -> list[list[int]]:
    """Runs of non-special tokens the pipeline joins into one entity (``O`` runs included)."""
    groups: list[list[int]] = []
    for token in np.flatnonzero(~spans.special):
        starts, kind = _tag(labels[best[token]])
        if groups and not starts and _tag(labels[best[groups[-1][-1]]])[1] == kind:
            groups[-1].append(int(token))
        else:
            groups.append([int(token)])
    return groups


def _merged(spans: TextSpans, groups: list[list[int]], names: list[str]) -> tuple[list[list[int]], list[str]]:
    """Neighbouring groups of one type joined when only whitespace separates them in the text."""
    out: list[list[int]] = []
    out_names: list[str] = []
    for group, name in zip(groups, names, strict=True):
        if out and name != _OUTSIDE and out_names[-1] == name:
            gap = spans.text[int(spans.offsets[out[-1][-1], 1]) : int(spans.offsets[group[0], 0])]
            if not gap.strip():
                out[-1] = out[-1] + group
                continue
        out.append(group)
        out_names.append(name)
    return out, out_names


def entities(spans: TextSpans, logits: np.ndarray, labels: Sequence[str], task: Task | None) -> list[Entity]:
    """One text's entities from its tokens' logits (``[tokens, classes]``, special tokens included)."""
    scores = _softmax(logits.astype(np.float32, copy=False))
    best = scores.argmax(axis=-1)
    groups = _groups(spans, best, labels)
    names = [labels[best[group[0]]].split("-", 1)[-1] for group in groups]
    if merge_adjacent(task):
        groups, names = _merged(spans, groups, names)
    wanted = set(task.labels) if task and task.labels else None
    floor = threshold(task)
    found = []
    for group, label in zip(groups, names, strict=True):
        if label == _OUTSIDE or (wanted is not None and label not in wanted):
            continue
        score = float(np.mean(scores[group, best[group]]))
        if score < floor:
            continue
        start, end = int(spans.offsets[group[0], 0]), int(spans.offsets[group[-1], 1])
        found.append(Entity(spans.text[start:end], label, score, start, end))
    return found


def extractions(
    batch: Sequence[Prepared], logits: Sequence[np.ndarray], labels: Sequence[str], task: Task | None
) -> list[Extraction]:
    """Each item's entities; ``logits[i]`` holds item ``i``'s tokens only (no padding)."""
    return [
        Extraction(entities=entities(item.payload, item_logits, labels, task))
        for item, item_logits in zip(batch, logits, strict=True)
    ]
