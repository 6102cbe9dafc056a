"""GLiNER2.5-Decide against the gliner2 library on the same weights (a tiny GLiNER2 built from a
config, tests/builders.py): every label's probability equals the one the library computes for the
same tasks, built with the library's own schema builder, in the three request shapes (labels, label
groups, Laya's typed questions); documents cut at the window, Laya states, each item alone equal to
it inside a batch, the library's word splitter matched, and what is refused."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gliner2 import AutoExtractor
from gliner2.inference.schema import Schema
from gliner2.processing.word_splitter import WhitespaceTokenSplitter

from sie.adapters.batch import AnnotatedText, ModelInput
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.decide.words import words
from sie.adapters.gliner2_decide import Gliner2Decider
from sie.core.extraction import Extraction
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.conftest import extracted

TEXTS = [
    "The delivery was late and the box arrived crushed; I want my money back",
    "Great service!",
    "ok",
]
PROMPT = "How does the customer feel?"


@pytest.fixture(scope="module")
def folder(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.gliner2(splade_dir, tmp_path_factory.mktemp("gliner2-decide"))


@pytest.fixture(scope="module")
def decider(folder: Path) -> Gliner2Decider:
    return Gliner2Decider.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512))


@pytest.fixture(scope="module")
def library(folder: Path) -> Any:
    return AutoExtractor.from_pretrained(str(folder), map_location="cpu").eval()


def decide(
    decider: Gliner2Decider,
    inputs: list[ModelInput],
    labels: list[str] | None = None,
    options: dict[str, Any] | None = None,
    instruction: str | None = None,
    output_schema: dict[str, Any] | None = None,
) -> list[Extraction]:
    task = Task.of(labels or [], options or {}, instruction, output_schema)
    forward = Forward(frozenset({Capability.EXTRACT}), task=task)
    return extracted(decider, inputs, forward)


def library_probabilities(model: Any, text: str, schema: Schema) -> dict[str, np.ndarray]:
    """Every task's label probabilities as the library computes them for ``text`` (its decoding keeps
    only a single-label task's best label, so they are read where it computes them)."""
    seen: dict[str, np.ndarray] = {}
    compute = model._compute_classification_probabilities

    def recording(*args: Any, **kwargs: Any) -> Any:
        found = compute(*args, **kwargs)
        if found is not None:
            seen[found[0]] = found[2].float().numpy()
        return found

    model._compute_classification_probabilities = recording
    try:
        model.batch_extract([text], schema, batch_size=1, threshold=0.5)
    finally:
        del model._compute_classification_probabilities
    return seen


def close(ours: dict[str, float], theirs: dict[str, float]) -> None:
    assert list(ours) == list(theirs)
    np.testing.assert_allclose(list(ours.values()), list(theirs.values()), atol=1e-5)


@pytest.mark.parametrize("multi_label", [False, True])
def test_labels_are_every_label_with_the_librarys_probability(
    decider: Gliner2Decider, library: Any, multi_label: bool
) -> None:
    labels = ["refund", "complaint", "praise"]
    kind = "multi-label" if multi_label else "single-label"
    got = decide(decider, list(TEXTS), labels, {"classification_type": kind}, PROMPT)
    for text, extraction in zip(TEXTS, got, strict=True):
        schema = Schema().classification("label", labels, multi_label=multi_label, prompt=PROMPT)
        p = library_probabilities(library, text, schema)["label"]
        found = {c.label: c.score for c in extraction.classifications}
        close(found, dict(sorted(zip(labels, p.tolist(), strict=True), key=lambda pair: -pair[1])))
        assert extraction.data == {}
        assert math.isclose(sum(found.values()), 1.0, rel_tol=1e-6) != multi_label


def test_label_groups_answer_each_group_and_name_labels_group_dot_label(
    decider: Gliner2Decider, library: Any
) -> None:
    groups = {"sentiment": ["positive", "negative"], "topic": ["shipping", "billing", "product"]}
    options = {"label_groups": groups, "threshold": 0.0}
    got = decide(decider, TEXTS[:1], options=options, instruction=PROMPT)[0]
    schema = Schema()
    for group, labels in groups.items():
        schema.classification(group, labels, prompt=PROMPT)
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of([], options, PROMPT))
    (row,) = decider.prepare(TEXTS[:1], forward)
    assert list(row.ids) == library_row(library, TEXTS[0] + ".", schema)[0]
    p = library_probabilities(library, TEXTS[0], schema)
    for group, labels in groups.items():
        probabilities = dict(zip(labels, p[group].tolist(), strict=True))
        answer = got.data[group]
        assert answer["type"] == "choice" and answer["choice"] == max(
            probabilities, key=probabilities.__getitem__
        )
        close(answer["probabilities"], probabilities)
        entropy = -sum(v * math.log(v) for v in probabilities.values())
        assert answer["confidence"] == pytest.approx(1 - entropy / math.log(len(labels)), abs=1e-6)
    expected = {f"{g}.{label}": v for g in groups for label, v in got.data[g]["probabilities"].items()}
    assert [c.label for c in got.classifications] == sorted(expected, key=lambda k: -expected[k])


QUESTIONS: dict[str, Any] = {
    "intent": {
        "type": "choice",
        "instructions": "What does the customer want?",
        "criteria": {"refund": "their money back", "replace": {"item": "a new one"}, "info": ""},
    },
    "anger": {"type": "score", "instructions": "How angry?", "criteria": ["1", "a little", "very"]},
    "calm": {"type": "score", "instructions": "How calm?", "criteria": ["0", "1"]},  # levels named alone
    "escalate": {
        "type": "noul",
        "instructions": "Should a human take over?",
        "criteria": {"TRUE": "the customer is upset"},
        "labels": {"false": "keep bot", "true": "hand over"},
    },
    "channel": {"type": "choice", "instructions": {"ask": "which channel"}, "criteria": ["email", "phone"]},
}


def questions_schema() -> Schema:
    """QUESTIONS as the library's own builder lists them: a criterion describes its label, a score
    question's levels are "0".."k-1", a noul question's labels its answers' wording."""
    schema = Schema()
    schema.classification(
        "intent",
        ["refund", "replace", "info"],
        prompt="What does the customer want?",
        label_descriptions={"refund": "their money back", "replace": '{"item": "a new one"}'},
    )
    schema.classification(
        "anger",
        ["0", "1", "2"],
        prompt="How angry?",
        label_descriptions={"0": "1", "1": "a little", "2": "very"},  # "0" alone would say nothing
    )
    schema.classification("calm", ["0", "1"], prompt="How calm?")
    schema.classification(
        "escalate",
        ["hand over", "keep bot"],
        prompt="Should a human take over?",
        label_descriptions={"hand over": "the customer is upset"},
    )
    schema.classification("channel", ["email", "phone"], prompt='{"ask": "which channel"}')
    return schema


def test_typed_questions_are_answered_in_data_as_laya_answers_them(
    decider: Gliner2Decider, library: Any
) -> None:
    got = decide(decider, TEXTS[:2], output_schema=QUESTIONS)
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of([], {}, None, QUESTIONS))
    for text, extraction in zip(TEXTS[:2], got, strict=True):
        # The row is the library's, token for token (the tiny model's scores move little with it).
        (row,) = decider.prepare([text], forward)
        normalized = text if text.endswith("!") else text + "."
        assert list(row.ids) == library_row(library, normalized, questions_schema())[0]
        p = library_probabilities(library, text, questions_schema())
        assert extraction.classifications == [] and list(extraction.data) == list(QUESTIONS)
        intent = extraction.data["intent"]
        close(
            intent["probabilities"],
            dict(zip(["refund", "replace", "info"], p["intent"].tolist(), strict=True)),
        )
        anger = extraction.data["anger"]
        assert anger["legend"] == {"0": "1", "1": "a little", "2": "very"}
        assert anger["score"] == pytest.approx(float(np.dot([0, 1, 2], p["anger"])), abs=1e-5)
        close(anger["probabilities"], dict(zip(["0", "1", "2"], p["anger"].tolist(), strict=True)))
        escalate = extraction.data["escalate"]
        true, false = p["escalate"].tolist()
        assert escalate["noul"] == pytest.approx(true, abs=1e-5)
        assert escalate["answer"] == (true > false)
        assert escalate["confidence"] == pytest.approx(max(true, 1 - true), abs=1e-5)
        assert extraction.data["channel"]["choice"] in ("email", "phone")


def library_row(library: Any, text: str, schema: Schema) -> tuple[list[int], list[int], int]:
    """The library's row for ``text`` (its ids, where each word starts) and its prompt's length."""
    record = library.processor.transform_and_format(text, schema.build())
    return list(record.input_ids), list(record.text_word_first_positions), record.text_word_first_positions[0]


def test_a_document_is_cut_to_the_whole_words_that_fit_its_window(folder: Path, library: Any) -> None:
    small = Gliner2Decider.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 48))
    labels = ["yes", "no"]
    text = " ".join(f"word{i} reads on" for i in range(60))
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, {}))
    (row,) = small.prepare([text], forward)
    ids, starts, _ = library_row(library, text + ".", Schema().classification("label", labels))
    fits = max(start for start in [*starts, len(ids)] if start <= 48)  # the last word boundary within 48
    assert list(row.ids) == ids[:fits] and fits < len(ids)
    assert decide(small, [text], labels)[0].classifications  # scored as any row (the tests above)
    too_long, short = decide(small, [text, "short"], labels, {"overflow_policy": "error"})
    assert too_long.error is not None and too_long.error.code == "INPUT_TOO_LONG"
    assert too_long.error.message.endswith("-token window (overflow_policy 'error')")
    assert (too_long.classifications, too_long.data) == ([], {})
    (alone,) = decide(small, ["short"], labels, {"overflow_policy": "error"})
    assert short.error is None and short.classifications == alone.classifications


def test_a_laya_state_is_read_as_its_text_and_turns_from_the_newest(
    folder: Path, decider: Gliner2Decider, library: Any
) -> None:
    labels = ["yes", "no"]
    state = {"order": 42, "status": "lost", "note": "Où est mon colis?"}
    as_state = decide(decider, [AnnotatedText("", {"state": state})], labels)[0]
    as_text = decide(decider, [json.dumps(state, ensure_ascii=False)], labels)[0]
    assert as_state.classifications == as_text.classifications
    turns = [{"role": "user", "text": f"message number {i} about the parcel"} for i in range(80)]
    small = Gliner2Decider.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 64))
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, {}))
    (row,) = small.prepare([AnnotatedText("", {"state": turns})], forward)
    ids, starts, prompt = library_row(
        library, json.dumps(turns) + ".", Schema().classification("label", labels)
    )
    newest = len(row.ids) - prompt  # the document's tokens read: the last words of the whole rendering
    assert len(row.ids) <= 64 and list(row.ids[prompt:]) == ids[len(ids) - newest :]
    assert len(ids) - newest in starts  # whole words


def test_an_item_alone_equals_it_inside_a_batch(decider: Gliner2Decider) -> None:
    together = decide(decider, list(TEXTS), output_schema=QUESTIONS)
    for text, inside in zip(TEXTS, together, strict=True):
        (alone,) = decide(decider, [text], output_schema=QUESTIONS)
        for qid in QUESTIONS:
            a, b = alone.data[qid], inside.data[qid]
            key = "probabilities" if "probabilities" in a else "noul"
            np.testing.assert_allclose(
                np.asarray(list(a[key].values()) if key == "probabilities" else a[key]),
                np.asarray(list(b[key].values()) if key == "probabilities" else b[key]),
                atol=1e-5,
            )


def test_words_are_the_librarys_and_a_run_of_dots_is_read_in_linear_time() -> None:
    library_words = WhitespaceTokenSplitter()
    rng = random.Random(0)
    alphabet = list("aZz09.@-_%+ :/wthps,!?\n\u0301\u0130\u212a")
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        for extra in ("", " http://x.y", " www.a-b", " a.b@c.de", " x@y.zz"):
            for sample in (text + extra, extra + text):
                assert list(words(sample)) == list(library_words(sample)), sample
    assert len(list(words("." * 65536))) == 65536  # the library's pattern takes seconds on this


@pytest.mark.parametrize(
    ("labels", "options", "instruction", "schema", "message"),
    [
        ([], {}, None, None, "requires typed questions"),
        (["a"], {}, None, QUESTIONS, "either output_schema"),
        ([], {"label_groups": {"g": ["a"]}}, None, QUESTIONS, "either output_schema"),
        ([], {}, "why", QUESTIONS, "applies only to labels"),
        (["a"], {"label_groups": {"g": ["a"]}}, None, None, "either labels or options.label_groups"),
        (["a [L] b"], {}, None, None, "structural token"),
        (["a", " a "], {}, None, None, "unique"),
        ([f"l{i}" for i in range(65)], {}, None, None, "at most 64 labels"),
        (["a"], {"threshold": 2}, None, None, "threshold"),
        (["a"], {"threshold": True}, None, None, "threshold"),
        (["a"], {"classification_type": "many"}, None, None, "classification_type"),
        (["a"], {"classification_type": "multi-label", "multi_label": False}, None, None, "contradicts"),
        (["a"], {"group_encoding": "separate"}, None, None, "group_encoding"),
        (["a"], {"examples": [["x", "a"]]}, None, None, "few-shot"),
        (["a"], {"overflow_policy": "drop"}, None, None, "overflow_policy"),
        ([], {"label_groups": {"g": []}}, None, None, "non-empty list"),
        ([], {"label_groups": [["g", ["a"]]]}, None, None, "non-empty object"),
        ([], {}, None, {"q": {"type": "rank", "instructions": "x"}}, "unknown type"),
        ([], {}, None, {"q": {"type": "choice", "criteria": ["a"]}}, "no 'instructions'"),
        ([], {}, None, {"q": {"type": "score", "instructions": "x", "criteria": {}}}, "list of level"),
        (
            [],
            {},
            None,
            {"q": {"type": "noul", "instructions": "x", "criteria": {"maybe": "?"}}},
            "keyed only",
        ),
        (
            [],
            {},
            None,
            {"q": {"type": "choice", "instructions": "x", "criteria": ["a"], "labels": {}}},
            "only",
        ),
        (
            [],
            {},
            None,
            {"q": {"type": "noul", "instructions": "x", "labels": {"false": "a", "true": "a"}}},
            "distinct",
        ),
        ([], {}, None, ["not", "a", "mapping"], "must map question ids"),
        (["a"], {}, "x" * 2049, None, "at most 2048 characters"),
    ],
)
def test_bad_requests_are_refused(
    decider: Gliner2Decider,
    labels: list[str],
    options: dict[str, Any],
    instruction: str | None,
    schema: Any,
    message: str,
) -> None:
    with pytest.raises(UnsupportedInput, match=message):
        decide(decider, ["some text"], labels, options, instruction, schema)


def test_bad_items_fail_alone_and_prompts_that_leave_no_room_are_refused(decider: Gliner2Decider) -> None:
    """An unreadable item is that item's ``INVALID_INPUT`` (the public server's per-item error), the
    item beside it is answered; a prompt too long for every item fails the request."""
    for item in (" ", AnnotatedText("text", {"state": "also a state"}), AnnotatedText("", {"state": 3})):
        bad, good = decide(decider, [item, "fine"], ["a"])
        assert bad.error is not None and bad.error.code == "INVALID_INPUT"
        assert "non-blank text, or metadata.state" in bad.error.message
        assert good.error is None and good.classifications
    long = {f"q{i}": {"type": "choice", "instructions": "x " * 100, "criteria": ["a", "b"]} for i in range(8)}
    with pytest.raises(UnsupportedInput, match="takes at most 256"):
        decide(decider, ["text"], output_schema=long)
    assert decide(decider, ["still serving"], ["a", "b"])[0].classifications


def test_rows_of_requests_that_compare_equal_are_each_read_at_their_own_markers(
    decider: Gliner2Decider,
) -> None:
    """``1 == True`` and ``2 == 2.0``, so these two tasks batch together, yet their criteria render
    as different descriptions ("1" / "true"): different prompts, different marker positions."""
    first = {"q": {"type": "choice", "instructions": "x", "criteria": {"a": 1, "b": 2}}}
    second = {"q": {"type": "choice", "instructions": "x", "criteria": {"a": True, "b": 2.0}}}
    forwards = [
        Forward(frozenset({Capability.EXTRACT}), task=Task.of([], {}, None, s)) for s in (first, second)
    ]
    assert forwards[0] == forwards[1]
    rows = [decider.prepare([TEXTS[0]], forward)[0] for forward in forwards]
    assert rows[0].payload.markers != rows[1].payload.markers
    together = decider.run(rows, forwards[0]).extractions or []
    for row, forward, inside in zip(rows, forwards, together, strict=True):
        (alone,) = decider.run([row], forward).extractions or []
        close(inside.data["q"]["probabilities"], alone.data["q"]["probabilities"])


def test_a_null_noul_wording_is_the_default_and_deep_nesting_is_refused(decider: Gliner2Decider) -> None:
    null = {"q": {"type": "noul", "instructions": "Is it late?", "labels": None}}
    default = {"q": {"type": "noul", "instructions": "Is it late?"}}
    assert decide(decider, [TEXTS[0]], output_schema=null) == decide(
        decider, [TEXTS[0]], output_schema=default
    )
    with pytest.raises(UnsupportedInput, match="only supported for noul"):
        decide(
            decider,
            ["x"],
            output_schema={"q": {"type": "choice", "instructions": "x", "criteria": ["a"], "labels": None}},
        )
    deep: Any = "leaf"
    for _ in range(500):
        deep = {"d": deep}
    with pytest.raises(UnsupportedInput, match="nest at most 64 levels"):
        Task.of([], {}, None, {"q": {"type": "choice", "instructions": "x", "criteria": {"a": deep}}})
