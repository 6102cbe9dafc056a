"""jina-reranker-v2 checkpoints (Jina's Hub-code layout) against sentence-transformers' ``CrossEncoder``
on the same weights saved by transformers.

The builder saves one seeded XLM-RoBERTa reranker both ways (tests/builders.py), so equal scores show
that every renamed and split weight landed where transformers' model reads it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file, save_file
from sentence_transformers import CrossEncoder
from transformers import AutoTokenizer

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.jina_reranker import JinaRerankerScorer
from sie.core.options import Capability, ComputePrecision
from tests import builders
from tests.adapters.test_cross_encoder import PAIRS

SCORE = Forward(frozenset({Capability.SCORE}))


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, splade_dir: Path) -> tuple[Path, Path]:
    return builders.jina_reranker(splade_dir, tmp_path_factory.mktemp("jina"))


def _scorer(folder: Path, **loadtime: object) -> JinaRerankerScorer:
    return JinaRerankerScorer.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256, loadtime=loadtime))


def test_scores_equal_sentence_transformers_on_the_transformers_weights(folders: tuple[Path, Path]) -> None:
    reference_folder, jina = folders
    reference = CrossEncoder(str(reference_folder), device="cpu", max_length=256).predict(PAIRS)
    scorer = _scorer(jina)
    assert scorer.packs_tokens  # transformers' XLM-RoBERTa, so our packed forward runs it
    scores = scorer.run(scorer.prepare(PAIRS, SCORE), SCORE).scores
    assert scores is not None
    np.testing.assert_allclose(scores, reference, atol=1e-5)
    assert np.ptp(scores) > 1e-4


def test_a_pair_alone_scores_as_in_a_batch(folders: tuple[Path, Path]) -> None:
    scorer = _scorer(folders[1])
    batch = scorer.run(scorer.prepare(PAIRS, SCORE), SCORE).scores
    assert batch is not None
    for index, pair in enumerate(PAIRS):
        alone = scorer.run(scorer.prepare([pair], SCORE), SCORE).scores
        assert alone is not None
        np.testing.assert_allclose(alone[0], batch[index], atol=1e-6)


def test_the_padded_forward_gives_the_same_scores(folders: tuple[Path, Path]) -> None:
    packed, padded = _scorer(folders[1]), _scorer(folders[1], packed=False)
    assert not padded.packs_tokens
    batch = packed.prepare(PAIRS, SCORE)
    np.testing.assert_allclose(packed.run(batch, SCORE).scores, padded.run(batch, SCORE).scores, atol=1e-6)


def test_a_weight_the_mapping_does_not_place_fails_the_load(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    """A checkpoint of another layout must not run with freshly initialised layers."""
    jina = folders[1]
    broken = tmp_path / "broken"
    broken.mkdir()
    weights = load_file(str(jina / "model.safetensors"))
    weights["roberta.encoder.layers.1.attn.out.weight"] = weights.pop(
        "roberta.encoder.layers.1.mixer.out_proj.weight"
    )
    save_file(weights, str(broken / "model.safetensors"))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((jina / name).read_bytes())
    with pytest.raises(
        ValueError, match=r"no weights for roberta\.encoder\.layer\.1\.attention\.output\.dense\.weight"
    ):
        _scorer(broken)


def test_a_rotary_jina_checkpoint_is_refused(folders: tuple[Path, Path], tmp_path: Path) -> None:
    """jina-embeddings-v3 shares the config class but rotates its positions: not this model."""
    jina = folders[1]
    rotary = tmp_path / "rotary"
    rotary.mkdir()
    config = json.loads((jina / "config.json").read_text())
    (rotary / "config.json").write_text(json.dumps({**config, "position_embedding_type": "rotary"}))
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (rotary / name).write_bytes((jina / name).read_bytes())
    with pytest.raises(ValueError, match="rotary"):
        _scorer(rotary)


def test_a_pair_tells_the_callers_text_in_it(folders: tuple[Path, Path]) -> None:
    """``usage``: a pair's ``content`` is the query and the document each tokenized alone by the
    reranker's tokenizer; a document cut to fit 256 tokens counts what is left of it (every token of
    the pair but the separators)."""
    tokenizer = AutoTokenizer.from_pretrained(str(folders[1]))

    def alone(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    long = " ".join(["pressure"] * 400)
    prepared = _scorer(folders[1]).prepare([*PAIRS, (PAIRS[0][0], long)], SCORE)
    assert [item.content for item in prepared[:-1]] == [alone(q) + alone(d) for q, d in PAIRS]
    cut = prepared[-1]
    separators = sum(int(i) in tokenizer.all_special_ids for i in cut.ids)
    assert len(cut.ids) == 256 and separators >= 3 and cut.content == 256 - separators
    assert all(item.input_tokens == len(item.ids) for item in prepared)
