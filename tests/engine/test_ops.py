"""score, extract and admission through the engine in process: the calls a queue worker makes, with no
server. Values are held to their reference (sentence-transformers' CrossEncoder, the engine's own
encode for similarity) so the assembly around the forward is what is tested."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import CrossEncoder

from sie.catalog.admission import RequestLimits
from sie.catalog.catalog import Catalog
from sie.catalog.errors import InvalidInput
from sie.core.options import ComputePrecision
from sie.engine.engine import Engine, EngineLimits
from sie.engine.loader import LoadSettings
from sie.observability.metrics import Metrics
from sie.weights.sources import WeightSources
from sie.wire.requests import EncodeParams, EncodeRequest, ExtractParams, ExtractRequest, Item, ScoreRequest
from tests import builders
from tests.conftest import MODELS_DIR

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
RAMPART = "nationaldesignstudio/rampart"
RERANKER = "test/reranker"
QUERY = "what causes high blood pressure"
DOCUMENTS = ["Hypertension is often caused by stress and salt.", "The film ran for three hours.", "ok"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory, splade_dir: Path) -> Path:
    """The shipped catalogue plus a tiny BERT reranker built from the packaged SPLADE backbone."""
    root = tmp_path_factory.mktemp("ops-models")
    weights = builders.bert_reranker(splade_dir, root / "reranker-weights")
    for shipped in MODELS_DIR.glob("*.yaml"):
        (root / shipped.name).write_text(shipped.read_text())
    (root / "reranker.yaml").write_text(
        f"sie_id: {RERANKER}\nweights_path: {weights}\ntasks: {{score: {{}}}}\nmax_sequence_length: 256\n"
        "profiles: {default: {max_batch_tokens: 4096, adapter_path: sie.adapters.cross_encoder:CrossEncoderScorer}}\n"
    )
    return root


@pytest.fixture
async def engine(models_dir: Path, tmp_path: Path) -> AsyncIterator[Engine]:
    load = LoadSettings("cpu", ComputePrecision.FLOAT32, 2, WeightSources(tmp_path, hf_fallback=False))
    limits = EngineLimits(64, 5, 512, 1, request=RequestLimits(max_item_text_bytes=1000))
    async with Engine(Catalog.from_directory(models_dir), load, limits, Metrics()) as running:
        yield running


async def test_a_cross_encoder_ranks_as_sentence_transformers_scores(engine: Engine, models_dir: Path):
    request = ScoreRequest(Item(id="q", text=QUERY), [Item(text=d) for d in DOCUMENTS])
    answer = await engine.score(RERANKER, request, wait_loaded=True)
    folder = Path(str(engine.require(RERANKER).config.weights_path))
    reference = CrossEncoder(str(folder), device="cpu", max_length=256).predict(
        [(QUERY, d) for d in DOCUMENTS]
    )
    response = answer.response
    assert (response.model, response.query_id) == (RERANKER, "q")
    assert [s.rank for s in response.scores] == [0, 1, 2]
    expected = sorted(range(3), key=lambda i: -reference[i])
    assert [s.item_id for s in response.scores] == [f"item-{i}" for i in expected]
    np.testing.assert_allclose([s.score for s in response.scores], reference[expected], atol=1e-5)
    assert answer.tokens == response.usage.input_tokens > 0


async def test_similarity_scores_are_the_cosines_of_the_engines_own_embeddings(engine: Engine):
    items = [Item(id=str(i), text=d) for i, d in enumerate(DOCUMENTS)]
    request = ScoreRequest(Item(text=QUERY), items, options={"score_mode": "dense"})
    answer = await engine.score(MINILM, request, wait_loaded=True)
    query = await engine.encode(
        MINILM, EncodeRequest([Item(text=QUERY)], EncodeParams(options={"is_query": True}))
    )
    documents = await engine.encode(MINILM, EncodeRequest(items))
    q = query.response.items[0].dense.values
    cosines = {r.id: float(r.dense.values @ q) for r in documents.response.items}
    for entry in answer.response.scores:
        assert entry.score == pytest.approx(cosines[entry.item_id], abs=1e-5)
    assert [e.item_id for e in answer.response.scores] == sorted(cosines, key=lambda i: -cosines[i])


async def test_extract_finds_the_pii_the_packaged_tagger_knows(engine: Engine):
    text = "My name is John Smith and I live in London."
    answer = await engine.extract(RAMPART, ExtractRequest([Item(text=text)]), wait_loaded=True)
    (item,) = answer.response.items
    assert item.id == "item-0"
    assert [(e.label, e.text) for e in item.entities] == [
        ("GIVEN_NAME", "John"),
        ("SURNAME", "Smith"),
        ("CITY", "London"),
    ]
    assert all(text[e.start : e.end] == e.text for e in item.entities)
    labelled = await engine.extract(
        RAMPART, ExtractRequest([Item(text=text)], ExtractParams(labels=["CITY"]))
    )
    assert [e.label for e in labelled.response.items[0].entities] == ["CITY"]


async def test_every_operation_checks_item_sizes_before_any_model_work(engine: Engine):
    big = Item(text="x" * 1001)
    calls = [
        engine.encode(MINILM, EncodeRequest([Item(text="a"), big])),
        engine.score(RERANKER, ScoreRequest(Item(text="q"), [Item(text="a"), big])),
        engine.score(RERANKER, ScoreRequest(big, [Item(text="a")])),
        engine.extract(RAMPART, ExtractRequest([Item(text="a"), big])),
    ]
    messages = []
    for call in calls:
        with pytest.raises(InvalidInput) as info:
            await call
        messages.append(str(info.value).split(" must ")[0])
    assert messages == ["Field 'items[1]'", "Field 'items[1]'", "Field 'query'", "Field 'items[1]'"]
    assert all(slot.model is None for slot in engine.slots())  # nothing was loaded for them


async def test_operations_refuse_what_the_model_cannot_do(engine: Engine):
    with pytest.raises(InvalidInput, match="does not support extraction"):
        await engine.extract(MINILM, ExtractRequest([Item(text="a")]))
    with pytest.raises(InvalidInput, match="does not support scoring"):
        await engine.score(RAMPART, ScoreRequest(Item(text="q"), [Item(text="a")]))
    with pytest.raises(InvalidInput, match="does not take output_schema"):
        await engine.extract(
            RAMPART, ExtractRequest([Item(text="a")], ExtractParams(output_schema={"type": "object"}))
        )
    with pytest.raises(InvalidInput, match="Option 'lora_id' must be a non-empty string"):
        await engine.score(RERANKER, ScoreRequest(Item(text="q"), [Item(text="a")], options={"lora_id": 3}))


async def test_metrics_measure_the_phases_and_the_queue_empties_after_a_burst(
    models_dir: Path, tmp_path: Path
):
    metrics = Metrics()
    load = LoadSettings("cpu", ComputePrecision.FLOAT32, 2, WeightSources(tmp_path, hf_fallback=False))
    async with Engine(
        Catalog.from_directory(models_dir), load, EngineLimits(8, 5, 512, 1), metrics
    ) as engine:
        await engine.preload([MINILM])
        burst = [engine.encode(MINILM, EncodeRequest([Item(text=f"text {i}")] * 4)) for i in range(10)]
        await asyncio.gather(*burst)
        registry = metrics.registry
        for phase in ("queue", "tokenize", "inference"):
            labels = {"model": MINILM, "endpoint": "encode", "phase": phase}
            assert registry.get_sample_value("sie_request_duration_seconds_count", labels) == 10
        assert registry.get_sample_value("sie_queue_depth", {"model": MINILM}) == 0


async def test_a_misspelt_option_is_refused_with_the_allowed_ones(engine: Engine):
    with pytest.raises(InvalidInput) as info:
        await engine.encode(
            MINILM, EncodeRequest([Item(text="a")], EncodeParams(options={"normalise": False}))
        )
    message = str(info.value)
    assert message.startswith(f"Unknown option 'normalise' for model '{MINILM}'. Allowed: ")
    assert "normalize" in message and "is_query" in message and "threshold" not in message
    with pytest.raises(InvalidInput, match="Unknown options 'score-mode', 'x'"):
        await engine.score(
            MINILM, ScoreRequest(Item(text="q"), [Item(text="a")], options={"score-mode": 1, "x": 2})
        )
    with pytest.raises(InvalidInput, match="Unknown option 'treshold'"):
        await engine.extract(
            RAMPART, ExtractRequest([Item(text="a")], ExtractParams(options={"treshold": 0.5}))
        )
    # The family's own options pass (the tagger reads threshold), and nothing was loaded for the refusals.
    assert all(slot.model is None for slot in engine.slots())
    answer = await engine.extract(
        RAMPART,
        ExtractRequest([Item(text="John")], ExtractParams(options={"threshold": 0.5})),
        wait_loaded=True,
    )
    assert len(answer.response.items) == 1
