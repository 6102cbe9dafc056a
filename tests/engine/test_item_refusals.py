"""An item that fails alone, through the engine in process (the calls a queue worker makes): refused by
its family before the device (GLiNER past its windows) or failed by the forward (GLiFormer missing a
required ``output_schema`` property), it is answered with its ``error`` and billed 0 tokens, and the
items beside it are answered as they are alone. An operation without per-item errors (encode) fails
the request with the refused item's code instead."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sie.adapters.contract import Forward
from sie.catalog.admission import RequestLimits
from sie.catalog.catalog import Catalog
from sie.core.extraction import ItemError
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task
from sie.engine.engine import Engine, EngineLimits
from sie.engine.errors import RefusedItem
from sie.engine.infer import Infer
from sie.engine.loader import LoadSettings
from sie.engine.runner import BatchGroup
from sie.errors import rule_for
from sie.observability.metrics import Metrics
from sie.postprocess.outputs import Postprocess
from sie.weights.sources import WeightSources
from sie.wire.errors import ErrorCode
from sie.wire.requests import ExtractParams, ExtractRequest, Item
from tests import builders
from tests.conftest import MODELS_DIR

GLINER = "test/gliner"
GLIFORMER = "knowledgator/gliformer-base-v1"
LABELS = ["person", "location", "organization"]
GOOD = ["Alice lives in Paris.", "Bob has worked at Google in Mountain View since 2019."]
TOO_LONG = " ".join(["word"] * (129 * 320 + 64))  # 130 windows of 384 words: past GLiNER's 128
PEOPLE = {"type": "array", "items": {"type": "object", "properties": {"who": {"type": "string"}}}}
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "people": PEOPLE,
        "topic": {"enum": ["science", "business"]},
    },
}
GLIFORMER_TEXTS = [*builders.GLIFORMER_SENTENCES[:4], "Ada lived in London."]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory, splade_dir: Path) -> Path:
    """The shipped catalogue, a GLiNER built over the packaged BERT, and GLiFormer's shipped YAML on
    built weights (float32, so a document answers alike alone and in a batch)."""
    root = tmp_path_factory.mktemp("refusal-models")
    gliner = builders.gliner(splade_dir, root / "gliner-weights")
    gliformer = builders.gliformer(root / "gliformer-weights")
    for shipped in MODELS_DIR.glob("*.yaml"):
        text = shipped.read_text()
        if shipped.name == "knowledgator__gliformer-base-v1.yaml":
            text = re.sub(r"compute_precision: \w+", "compute_precision: float32", text)
            text += f"weights_path: {gliformer}\n"
        (root / shipped.name).write_text(text)
    (root / "gliner.yaml").write_text(
        f"sie_id: {GLINER}\nweights_path: {gliner}\ntasks: {{extract: {{}}}}\n"
        "profiles: {default: {max_batch_tokens: 8192, adapter_path: sie.adapters.gliner:GlinerExtractor}}\n"
    )
    return root


@pytest.fixture
async def engine(models_dir: Path, tmp_path: Path) -> AsyncIterator[Engine]:
    load = LoadSettings("cpu", ComputePrecision.FLOAT32, 2, WeightSources(tmp_path, hf_fallback=False))
    limits = EngineLimits(64, 5, 512, 1, request=RequestLimits())
    async with Engine(Catalog.from_directory(models_dir), load, limits, Metrics()) as running:
        yield running


def gliner_request(texts: list[str]) -> ExtractRequest:
    return ExtractRequest([Item(text=text) for text in texts], ExtractParams(labels=LABELS))


async def test_a_refused_item_is_answered_with_its_error_and_billed_nothing(engine: Engine) -> None:
    batched = await engine.extract(GLINER, gliner_request([GOOD[0], TOO_LONG, GOOD[1]]), wait_loaded=True)
    alone = await engine.extract(GLINER, gliner_request(GOOD))
    items = batched.response.items
    assert [item.id for item in items] == ["item-0", "item-1", "item-2"]
    assert items[1].error == ItemError(
        "INPUT_TOO_LONG",
        "GLiNER reads at most 128 windows of 384 words; this text has 41344 words: split it into shorter items",
    )
    assert (items[1].entities, items[1].relations, items[1].data) == ([], [], {})
    for got, want in zip([items[0], items[2]], alone.response.items, strict=True):
        assert got.error is None
        assert [(e.text, e.label, e.start, e.end) for e in got.entities] == [
            (e.text, e.label, e.start, e.end) for e in want.entities
        ]
        assert [e.score for e in got.entities] == pytest.approx([e.score for e in want.entities], abs=1e-5)
    assert any(item.entities for item in alone.response.items), "nothing found: the comparison is vacuous"
    assert batched.tokens == alone.tokens == batched.response.usage.input_tokens > 0
    only = await engine.extract(GLINER, gliner_request([TOO_LONG]))
    assert only.tokens == only.response.usage.input_tokens == 0 and only.response.items[0].error is not None


async def test_an_item_its_forward_fails_is_billed_nothing(engine: Engine) -> None:
    """GLiFormer answers a document that lacks a required property as that item's INFERENCE_ERROR
    after the forward: the tokens billed are the answered documents' alone."""
    required = {**SCHEMA, "required": ["tags"]}
    params = ExtractParams(output_schema=required, options={"threshold": 0.2})
    request = ExtractRequest([Item(text=text) for text in GLIFORMER_TEXTS], params)
    answer = await engine.extract(GLIFORMER, request, wait_loaded=True)
    failed = [index for index, item in enumerate(answer.response.items) if item.error is not None]
    assert 0 < len(failed) < len(GLIFORMER_TEXTS), "every item or none failed: the test would be vacuous"
    errors = [item.error for item in answer.response.items if item.error is not None]
    assert {error.code for error in errors} == {"INFERENCE_ERROR"}
    answered = [text for index, text in enumerate(GLIFORMER_TEXTS) if index not in failed]
    plain = ExtractParams(output_schema=SCHEMA, options={"threshold": 0.2})
    alone = await engine.extract(GLIFORMER, ExtractRequest([Item(text=text) for text in answered], plain))
    assert answer.tokens == alone.tokens == answer.response.usage.input_tokens > 0
    assert [item.data for item in alone.response.items] == [
        item.data for index, item in enumerate(answer.response.items) if index not in failed
    ]


async def test_an_operation_without_item_errors_fails_the_request_with_the_items_code(engine: Engine) -> None:
    """Where the response has no ``items[i].error`` (encode, score), a refused item is the request's
    error with its code and message (nothing is queued)."""
    await engine.extract(GLINER, gliner_request([GOOD[0]]), wait_loaded=True)
    infer = Infer(1)
    try:
        with engine.registry.hold(GLINER) as held:
            forward = Forward(frozenset({Capability.DENSE}), task=Task.of(LABELS, {}))
            group = BatchGroup(forward, Postprocess(frozenset({Capability.DENSE})))
            with pytest.raises(RefusedItem, match="GLiNER reads at most 128 windows") as refused:
                await infer(held, [GOOD[0], TOO_LONG], group)
    finally:
        infer.close()
    rule = rule_for(refused.value)
    assert rule is not None and rule.code is ErrorCode.INPUT_TOO_LONG
