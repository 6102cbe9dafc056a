"""Laya against the ``laya`` library on the same weights (a tiny checkpoint built from a config,
tests/builders.py): every answer's probabilities equal the library's ``Agent.predict_batch`` (which
rounds them to 4 decimals) for texts, JSON states and conversations, in the public server's answer
shape; labels as one choice question; calibration temperatures clamped as the library clamps them;
each state alone equal to it inside a batch; and what is refused."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import laya
import numpy as np
import pytest
from laya.common import build_sequence

from sie.adapters.batch import AnnotatedText, ModelInput
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.laya import LABELS_INSTRUCTION, LayaDecider
from sie.catalog import families
from sie.core.extraction import Extraction
from sie.core.options import Capability, ComputePrecision, OverflowPolicy
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.conftest import extracted

QUESTIONS: dict[str, Any] = {
    "intent": {
        "type": "choice",
        "instructions": "What does the customer want?",
        "criteria": {"refund": "their money back", "replace": {"item": "a new one"}, "info": None},
    },
    "channel": {"type": "choice", "instructions": "Which channel?", "criteria": ["email", "phone"]},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["not", "a bit", "very", 4]},
    "human": {
        "type": "noul",
        "instructions": "Should a person take over?",
        "criteria": {"true": "the customer is upset"},
        "labels": {"false": "keep the bot", "true": "hand over"},
    },
}
STATES: list[Any] = [
    "My parcel is two weeks late and nobody answers the phone.",
    {"order": 42, "status": "lost", "note": "Où est mon colis?"},
    [{"role": "user", "text": f"message {i}: where is my parcel?"} for i in range(40)],
]


@pytest.fixture(scope="module")
def folder(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.laya(splade_dir, tmp_path_factory.mktemp("laya") / "checkpoint")


@pytest.fixture(scope="module")
def decider(folder: Path) -> LayaDecider:
    return LayaDecider.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512))


@pytest.fixture(scope="module")
def library(folder: Path) -> Any:
    with pytest.warns(RuntimeWarning, match="temperatures"):  # the checkpoint's 0.1 and 9.0
        return laya.load(str(folder), device="cpu")


def items(states: list[Any]) -> list[ModelInput]:
    return [s if isinstance(s, str) else AnnotatedText("", {"state": s}) for s in states]


def decide(
    decider: LayaDecider,
    inputs: list[ModelInput],
    labels: list[str] | None = None,
    options: dict[str, Any] | None = None,
    instruction: str | None = None,
    output_schema: dict[str, Any] | None = None,
) -> list[Extraction]:
    forward = Forward(
        frozenset({Capability.EXTRACT}), task=Task.of(labels or [], options or {}, instruction, output_schema)
    )
    return extracted(decider, inputs, forward)


def near(ours: dict[str, float], theirs: dict[str, float]) -> None:
    assert list(ours) == list(theirs)
    np.testing.assert_allclose(list(ours.values()), list(theirs.values()), atol=6e-5)  # theirs: 4 decimals


def test_answers_are_the_librarys_in_the_public_shape(decider: LayaDecider, library: Any) -> None:
    got = decide(decider, items(STATES), output_schema=QUESTIONS)
    want = library.predict_batch(STATES, QUESTIONS)
    for ours, theirs in zip(got, want, strict=True):
        assert ours.classifications == [] and list(ours.data) == list(QUESTIONS)
        answers = theirs["answers"]
        for qid in ("intent", "channel"):
            assert set(ours.data[qid]) == {"type", "choice", "probabilities", "confidence"}
            assert ours.data[qid]["choice"] == answers[qid]["choice"]
            near(ours.data[qid]["probabilities"], answers[qid]["probabilities"])
            p = np.asarray(list(ours.data[qid]["probabilities"].values()))
            entropy = -float((p * np.log(p)).sum())
            assert ours.data[qid]["confidence"] == pytest.approx(1 - entropy / math.log(len(p)), abs=1e-6)
        urgency = ours.data["urgency"]
        assert urgency["legend"] == {"0": "not", "1": "a bit", "2": "very", "3": 4}  # levels as sent
        near(urgency["probabilities"], answers["urgency"]["probabilities"])
        assert urgency["score"] == pytest.approx(answers["urgency"]["score"], abs=2e-4)
        human = ours.data["human"]
        assert set(human) == {"type", "noul", "answer", "confidence"}
        assert human["noul"] == pytest.approx(answers["human"]["noul"], abs=6e-5)
        assert human["answer"] == (human["noul"] > 0.5)
        assert human["confidence"] == pytest.approx(max(human["noul"], 1 - human["noul"]), abs=1e-9)


def test_temperatures_are_the_checkpoints_clamped_as_the_library_clamps_them(decider: LayaDecider) -> None:
    agent = decider._agent
    assert agent.temperature == [1.3, 0.5, 2.0]  # 0.1 for score questions becomes 0.5
    assert agent.temperature_by_options == {"choice:2": 0.7, "score:3-5": 5.0}  # 9.0 becomes 5.0


def test_labels_are_one_choice_question_answered_in_classifications(
    decider: LayaDecider, library: Any
) -> None:
    labels = [" billing", "shipping", "returns "]
    got = decide(decider, items(STATES[:1]), labels, {"threshold": 0.2})[0]
    question = {
        "label": {
            "type": "choice",
            "instructions": LABELS_INSTRUCTION,
            "criteria": [x.strip() for x in labels],
        }
    }
    (theirs,) = library.predict_batch(STATES[:1], question)
    probabilities = dict(zip(labels, theirs["answers"]["label"]["probabilities"].values(), strict=True))
    kept = {label: p for label, p in sorted(probabilities.items(), key=lambda x: -x[1]) if p >= 0.2}
    near({c.label: c.score for c in got.classifications}, kept)
    assert got.data == {}
    titled = decide(decider, items(STATES[:1]), labels, instruction="Which team handles it?")[0]
    (asked,) = library.predict_batch(
        STATES[:1], {"label": {**question["label"], "instructions": "Which team handles it?"}}
    )
    near(
        {c.label: c.score for c in titled.classifications},
        dict(
            sorted(
                zip(labels, asked["answers"]["label"]["probabilities"].values(), strict=True),
                key=lambda x: -x[1],
            )
        ),
    )


def test_a_state_alone_equals_it_inside_a_batch(decider: LayaDecider) -> None:
    together = decide(decider, items(STATES), output_schema=QUESTIONS)
    for state, inside in zip(STATES, together, strict=True):
        (alone,) = decide(decider, items([state]), output_schema=QUESTIONS)
        for qid in ("intent", "channel", "urgency"):
            near(alone.data[qid]["probabilities"], inside.data[qid]["probabilities"])
        assert alone.data["human"]["noul"] == pytest.approx(inside.data["human"]["noul"], abs=1e-5)


def test_a_row_is_the_librarys_and_its_tokens_are_metered(decider: LayaDecider, library: Any) -> None:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of([], {"max_len": 64}, None, QUESTIONS))
    (prepared,) = decider.prepare(items(STATES[2:]), forward)
    ids = list(QUESTIONS)
    internal = {qid: library._to_internal(q) for qid, q in QUESTIONS.items()}
    rows = library._encode_state(STATES[2], ids, internal, max_len=64)
    assert [row["ids"] for row in prepared.payload.items] == [row["ids"] for row in rows]
    assert prepared.cost == sum(len(row["ids"]) for row in rows) and all(
        len(row["ids"]) <= 64 for row in rows
    )


def test_the_public_adapter_name_loads_this_class() -> None:
    public = "sie_server.adapters.laya.adapter:LayaAdapter"
    assert families.canonical(public) == "sie.adapters.laya:LayaDecider"
    assert families.not_served(public) is None and families.takes_output_schema(public)


@pytest.mark.parametrize(
    ("labels", "options", "instruction", "schema", "message"),
    [
        ([], {}, None, None, "requires typed questions"),
        (["a"], {}, None, QUESTIONS, "not both"),
        ([], {}, "why", QUESTIONS, "applies only to labels"),
        (["a", " a"], {}, None, None, "unique"),
        (["a"], {"threshold": 1.5}, None, None, "threshold"),
        (["a"], {"max_len": 0}, None, None, "max_len"),
        (["a"], {"max_len": 4096}, None, None, "at most 128"),
        (["a"], {"head_max_len": 100, "max_len": 64}, None, None, "head_max_len must be at most max_len"),
        (
            [],
            {},
            None,
            {f"q{i}": {"type": "noul", "instructions": "x"} for i in range(65)},
            "at most 64 questions",
        ),
        ([], {}, None, {"q": {"type": "rank", "instructions": "x"}}, "unknown type"),
        ([], {}, None, {"q": {"type": "noul", "instructions": "x", "criteria": {"maybe": 1}}}, "keyed only"),
        (
            [],
            {},
            None,
            {"q": {"type": "choice", "instructions": "x", "criteria": [f"o{i}" for i in range(60)]}},
            "fit",
        ),
    ],
)
def test_bad_requests_are_refused(
    decider: LayaDecider,
    labels: list[str],
    options: dict[str, Any],
    instruction: str | None,
    schema: Any,
    message: str,
) -> None:
    with pytest.raises(UnsupportedInput, match=message):
        decide(decider, ["some text"], labels, options, instruction, schema)


def test_a_bad_item_fails_alone_and_the_others_are_answered_as_alone(decider: LayaDecider) -> None:
    """An unreadable item is that item's ``INVALID_INPUT`` (the public server's per-item error); the
    items beside it get what they get alone."""
    alone = decide(decider, ["still serving"], ["a", "b"])[0]
    assert alone.classifications and alone.error is None
    for item in (
        AnnotatedText("text", {"state": "a state too"}),
        AnnotatedText("", {"state": 5}),
        AnnotatedText("", {"state": {"when": {1, 2}}}),  # not JSON
    ):
        bad, good = decide(decider, [item, "still serving"], ["a", "b"])
        assert bad.error is not None and bad.error.code == "INVALID_INPUT"
        assert bad.error.message.startswith("Laya items need") or "JSON-serializable" in bad.error.message
        assert (bad.classifications, bad.data) == ([], {})
        assert good.error is None and [c.label for c in good.classifications] == [
            c.label for c in alone.classifications
        ]
        assert [c.score for c in good.classifications] == pytest.approx(
            [c.score for c in alone.classifications], abs=1e-5
        )


def test_an_item_may_hold_at_most_32768_tokens_of_rows(splade_dir: Path, tmp_path: Path) -> None:
    wide = LayaDecider.load(
        LoadSpec(
            builders.laya(splade_dir, tmp_path / "wide", max_len=1024), "cpu", ComputePrecision.FLOAT32, None
        )
    )
    questions = {f"q{i}": {"type": "noul", "instructions": "x"} for i in range(33)}
    with pytest.raises(UnsupportedInput, match="at most 32768 tokens per item: send at most 32 questions"):
        decide(wide, ["text"], output_schema=questions)
    assert decide(wide, ["text"], options={"max_len": 512}, output_schema=questions)[0].data  # 33 x 512 fits


def test_what_the_public_server_accepts_and_reads_as_it_does(decider: LayaDecider) -> None:
    """A caller's option_order is not read; empty instructions, null budgets and null noul labels are
    accepted; a noul question counts its two options toward the request's 1,024."""
    noul = {"type": "noul", "instructions": "Is it late?"}
    plain = decide(decider, [STATES[0]], output_schema={"q": noul})[0].data["q"]
    ordered = decide(decider, [STATES[0]], output_schema={"q": {**noul, "option_order": [1, 0]}})[0].data["q"]
    assert ordered == plain
    assert (
        decide(decider, [STATES[0]], output_schema={"q": {**noul, "instructions": ""}})[0].data["q"]["type"]
        == "noul"
    )
    nulls = decide(
        decider, [STATES[0]], options={"max_len": None, "head_max_len": None}, output_schema={"q": noul}
    )
    assert nulls[0].data["q"] == plain
    many = {"c": {"type": "choice", "instructions": "x", "criteria": [f"o{i}" for i in range(1000)]}}
    many |= {f"n{i}": noul for i in range(13)}
    with pytest.raises(UnsupportedInput, match="at most 1024 answer options per request, got 1026"):
        decide(decider, ["x"], output_schema=many)


def test_a_huge_state_is_cut_before_it_is_read_and_a_deep_one_refused(
    decider: LayaDecider, library: Any
) -> None:
    words = " ".join(f"word{i}" for i in range(60_000))  # far past a row: 128 tokens x 32 bytes are kept
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of([], {}, None, QUESTIONS))
    (prepared,) = decider.prepare([AnnotatedText("", {"state": {"log": words}})], forward)
    internal = {qid: library._to_internal(q) for qid, q in QUESTIONS.items()}
    whole = library._encode_state({"log": words}, list(QUESTIONS), internal)
    assert [row["ids"] for row in prepared.payload.items] == [row["ids"] for row in whole]
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    (refused,) = decide(decider, [AnnotatedText("", {"state": deep})], ["a", "b"])
    assert refused.error is not None and "JSON-serializable" in refused.error.message


def test_overflow_policy_error_refuses_a_state_its_rows_would_cut(decider: LayaDecider, library: Any) -> None:
    """``error`` refuses the state a row would cut (its longest row laid out whole, by the library,
    against ``max_len``), the other answered as alone; ``truncate_text`` answers what ``default`` does."""
    long = " ".join(f"word{i}" for i in range(200))
    options = {"max_len": 64}
    default, truncate, error = (
        Forward(frozenset({Capability.EXTRACT}), task=Task.of([], options, None, QUESTIONS), overflow=policy)
        for policy in OverflowPolicy
    )
    internal = {qid: library._to_internal(q) for qid, q in QUESTIONS.items()}
    head = int(library.cfg["head_max_len"])
    whole = max(
        len(build_sequence(library.tok, long, internal[qid], max_len=10**6, head_max_len=head)[0])
        for qid in QUESTIONS
    )
    assert whole > 64
    answered = extracted(decider, [STATES[0], long], error)
    assert answered[1].error is not None and answered[1].error.code == "INPUT_TOO_LONG"
    assert answered[1].error.message.startswith(
        f"The input takes {whole} tokens, past the model's 64-token window"
    )
    assert answered[0] == extracted(decider, [STATES[0]], default)[0] and answered[0].error is None
    assert extracted(decider, [STATES[0], long], truncate) == extracted(decider, [STATES[0], long], default)
    huge = AnnotatedText("", {"state": {"log": " ".join(f"word{i}" for i in range(60_000))}})
    (bounded,) = extracted(decider, [huge], error)  # tokenized only up to its byte bound
    assert bounded.error is not None and bounded.error.message.startswith("The input takes at least ")
