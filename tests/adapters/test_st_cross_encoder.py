"""Rerankers saved as sentence-transformers ``CrossEncoder`` modules (zerank-2's layout: a causal LM
under a chat template, ``LogitScore``, identity activation) against that library's ``predict``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import CrossEncoder

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.st_cross_encoder import SentenceTransformersCrossEncoder
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.adapters.test_cross_encoder import PAIRS

SCORE = Forward(frozenset({Capability.SCORE}))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, splade_dir: Path) -> Path:
    return builders.st_causal_reranker(splade_dir, tmp_path_factory.mktemp("zerank") / "model")


@pytest.fixture(scope="module")
def scorer(folder: Path) -> SentenceTransformersCrossEncoder:
    return SentenceTransformersCrossEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512))


def test_scores_equal_the_cross_encoders_own_predict(
    folder: Path, scorer: SentenceTransformersCrossEncoder
) -> None:
    reference = CrossEncoder(str(folder), device="cpu").predict(PAIRS)
    scores = scorer.run(scorer.prepare(PAIRS, SCORE), SCORE).scores
    assert scores is not None
    np.testing.assert_allclose(scores, reference, atol=1e-5)
    assert np.ptp(scores) > 1e-4


def test_a_pair_alone_scores_as_in_a_batch(scorer: SentenceTransformersCrossEncoder) -> None:
    batch = scorer.run(scorer.prepare(PAIRS, SCORE), SCORE).scores
    assert batch is not None
    for index, pair in enumerate(PAIRS):
        alone = scorer.run(scorer.prepare([pair], SCORE), SCORE).scores
        assert alone is not None
        np.testing.assert_allclose(alone[0], batch[index], atol=1e-5)


def test_the_row_is_the_chat_template_and_counts_its_tokens(
    folder: Path, scorer: SentenceTransformersCrossEncoder
) -> None:
    prepared = scorer.prepare(PAIRS[:1], SCORE)[0]
    text = CrossEncoder(str(folder), device="cpu").tokenizer.decode(prepared.ids.tolist())
    assert "system" in text and "assistant" in text and prepared.payload == PAIRS[0]


def test_an_instruction_goes_before_the_query(folder: Path, scorer: SentenceTransformersCrossEncoder) -> None:
    instructed = Forward(frozenset({Capability.SCORE}), task=Task(instruction="Find the medical cause"))
    scores = scorer.run(scorer.prepare(PAIRS, instructed), instructed).scores
    reference = CrossEncoder(str(folder), device="cpu").predict(
        [(f"Find the medical cause {q}", d) for q, d in PAIRS]
    )
    np.testing.assert_allclose(scores, reference, atol=1e-5)


def test_single_texts_and_rows_past_the_context_are_refused(folder: Path) -> None:
    short = SentenceTransformersCrossEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 64))
    with pytest.raises(UnsupportedInput, match="pairs"):
        short.prepare(["just a text"], SCORE)
    fits, past = short.prepare([("query", "doc"), ("query", "a document far too long " * 10)], SCORE)
    assert fits.error is None and past.error is not None
    assert past.error.code == "INPUT_TOO_LONG"
    assert past.error.message.startswith("The (query, document) pair takes ")
    assert "past this reranker's 64-token context" in past.error.message


def test_a_row_tells_the_callers_text_in_it(folder: Path, scorer: SentenceTransformersCrossEncoder) -> None:
    """``usage``: a row bills all its tokens, and its ``content`` is the instruction, the query and the
    document each tokenized alone by the model's tokenizer (the rest is the chat template)."""
    tokenizer = CrossEncoder(str(folder), device="cpu").tokenizer

    def alone(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    prepared = scorer.prepare(PAIRS, SCORE)
    assert [item.content for item in prepared] == [alone(q) + alone(d) for q, d in PAIRS]
    assert all(item.input_tokens == len(item.ids) > (item.content or 0) for item in prepared)
    instruction = "Find the medical cause"
    asked = scorer.prepare(PAIRS, Forward(frozenset({Capability.SCORE}), task=Task(instruction=instruction)))
    assert [item.content for item in asked] == [alone(instruction) + alone(q) + alone(d) for q, d in PAIRS]
