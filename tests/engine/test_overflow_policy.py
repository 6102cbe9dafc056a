"""``options.overflow_policy`` on every model, through the engine in process (what a server route and a
queue worker both call): ``default`` and ``truncate_text`` answer what the model answers for the text
cut to its window by hand, ``error`` refuses with 400 ``INPUT_TOO_LONG`` naming the item, its tokens
and the window (an extraction fails that item alone), and a bad value is the public 400."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.catalog.admission import RequestLimits
from sie.catalog.catalog import Catalog
from sie.catalog.errors import InvalidInput
from sie.core.options import ComputePrecision
from sie.engine.engine import Engine, EngineLimits
from sie.engine.loader import LoadSettings
from sie.errors import SieError, rule_for
from sie.observability.metrics import Metrics
from sie.weights.sources import WeightSources
from sie.wire.errors import ErrorCode
from sie.wire.requests import EncodeParams, EncodeRequest, ExtractParams, ExtractRequest, Item, ScoreRequest
from tests import builders
from tests.conftest import MODELS_DIR

MINILM = "sentence-transformers/all-MiniLM-L6-v2"  # a 256-token window
RAMPART = "nationaldesignstudio/rampart"  # token NER, a 512-token window
RERANKER = "test/reranker"  # a BERT cross-encoder, a 64-token window here
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "and",
    "the",
    "dog",
    "ran",
    "to",
    "the",
    "park",
    "while",
    "birds",
    "sang",
    "in",
    "green",
    "trees",
]
POLICIES = ("default", "truncate_text", "error")


def words(count: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(count))


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory, splade_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("overflow-models")
    weights = builders.bert_reranker(splade_dir, root / "reranker-weights")
    for shipped in MODELS_DIR.glob("*.yaml"):
        (root / shipped.name).write_text(shipped.read_text())
    (root / "reranker.yaml").write_text(
        f"sie_id: {RERANKER}\nweights_path: {weights}\ntasks: {{score: {{}}}}\nmax_sequence_length: 64\n"
        "profiles: {default: {max_batch_tokens: 4096, adapter_path: sie.adapters.cross_encoder:CrossEncoderScorer}}\n"
    )
    return root


@pytest.fixture
async def engine(models_dir: Path, tmp_path: Path) -> AsyncIterator[Engine]:
    load = LoadSettings("cpu", ComputePrecision.FLOAT32, 2, WeightSources(tmp_path, hf_fallback=False))
    limits = EngineLimits(64, 5, 512, 1, request=RequestLimits())
    async with Engine(Catalog.from_directory(models_dir), load, limits, Metrics()) as running:
        yield running


def assert_one_token_words(folder: Path) -> None:
    """Every word of ``WORDS`` is one token of the model's tokenizer: then a text of n words is n
    tokens plus the specials, and cutting it to the window by hand is cutting words."""
    tokenizer = TextTokenizer.from_folder(folder, None)
    assert all(len(tokenizer.encode([w], special_tokens=False)[0]) == 1 for w in WORDS)


async def dense(engine: Engine, texts: list[str], policy: str | None = None) -> np.ndarray:
    options = {"overflow_policy": policy} if policy else None
    answer = await engine.encode(
        MINILM, EncodeRequest([Item(text=t) for t in texts], EncodeParams(options=options)), wait_loaded=True
    )
    return np.stack([item.dense.values for item in answer.response.items if item.dense is not None])


def refusal(exc: SieError) -> tuple[str, str]:
    rule = rule_for(exc)
    assert rule is not None
    return rule.code.value, str(exc)


async def test_a_dense_model_truncates_by_default_and_on_request_and_refuses_on_error(
    engine: Engine, minilm_dir: Path
):
    assert_one_token_words(minilm_dir)
    long, cut = words(400), words(254)  # 254 words and [CLS] [SEP] fill the 256-token window
    by_hand = await dense(engine, ["short", cut])
    assert not np.allclose(by_hand[1], (await dense(engine, [words(253)]))[0], atol=1e-6)  # cuts matter
    for policy in (None, "default", "truncate_text"):
        np.testing.assert_allclose(await dense(engine, ["short", long], policy), by_hand, atol=1e-6)
    np.testing.assert_allclose(await dense(engine, ["short", cut], "error"), by_hand, atol=1e-6)  # fits
    with pytest.raises(SieError) as info:
        await dense(engine, ["short", long], "error")
    assert refusal(info.value) == (
        "INPUT_TOO_LONG",
        "Item 1: The input takes 402 tokens, past the model's 256-token window, and options.overflow_policy is "
        "'error'. Shorten it, or send overflow_policy 'truncate_text'.",
    )


async def test_a_cross_encoder_truncates_the_pair_or_refuses_it(engine: Engine, models_dir: Path):
    async def scores(documents: list[str], policy: str | None = None) -> list[float]:
        options = {"overflow_policy": policy} if policy else None
        request = ScoreRequest(Item(text="cat"), [Item(text=d) for d in documents], options=options)
        answer = await engine.score(RERANKER, request, wait_loaded=True)
        return [s.score for s in sorted(answer.response.scores, key=lambda s: s.item_id)]

    assert_one_token_words(models_dir / "reranker-weights")
    long, cut = words(100), words(60)  # [CLS] cat [SEP] + 60 words + [SEP] = 64 tokens
    by_hand = await scores(["a dog", cut])
    shorter = await scores(["a dog", words(59)])
    assert by_hand[1] != pytest.approx(shorter[1], abs=1e-6)  # where the cut falls matters
    for policy in (None, "default", "truncate_text"):
        assert await scores(["a dog", long], policy) == pytest.approx(by_hand, abs=1e-6)
    with pytest.raises(SieError) as info:
        await scores(["a dog", long], "error")
    code, message = refusal(info.value)
    assert code == "INPUT_TOO_LONG"
    assert message.startswith("Item 1: The input takes 104 tokens, past the model's 64-token window")


async def test_a_score_by_similarity_refuses_a_long_document_on_error(engine: Engine):
    request = ScoreRequest(
        Item(text="cat"),
        [Item(text="a"), Item(text=words(300))],
        options={"overflow_policy": "error", "score_mode": "dense"},
    )
    with pytest.raises(SieError) as info:
        await engine.score(MINILM, request, wait_loaded=True)
    assert refusal(info.value)[0] == "INPUT_TOO_LONG"
    assert str(info.value).startswith("Item 1: The input takes 302 tokens")


async def test_an_extraction_fails_the_long_item_alone(engine: Engine):
    texts = ["My name is John Smith and I live in London.", words(600), "Anna Berg lives in Paris."]

    async def extract(items: list[str], policy: str) -> list[object]:
        params = ExtractParams(options={"overflow_policy": policy})
        answer = await engine.extract(
            RAMPART, ExtractRequest([Item(text=t) for t in items], params), wait_loaded=True
        )
        return list(answer.response.items)

    answered = await extract(texts, "error")
    alone = await extract([texts[0], texts[2]], "error")
    failed = answered[1]
    assert failed.error is not None and failed.error.code == ErrorCode.INPUT_TOO_LONG.value
    assert failed.error.message.startswith("The input takes 602 tokens, past the model's 512-token window")
    assert failed.entities == []
    assert [a.entities for a in (answered[0], answered[2])] == [a.entities for a in alone]
    assert any(a.entities for a in alone), "no entity found: the comparison would be vacuous"
    truncated = await extract(texts, "truncate_text")
    assert all(item.error is None for item in truncated)


@pytest.mark.parametrize("bad", ["drop", 3, True, ["error"]])
async def test_a_bad_policy_is_the_public_400_on_every_operation(engine: Engine, bad: object):
    message = f"Invalid overflow_policy: {bad!r}. Must be one of ['default', 'error', 'truncate_text']."
    calls = [
        engine.encode(
            MINILM, EncodeRequest([Item(text="a")], EncodeParams(options={"overflow_policy": bad}))
        ),
        engine.score(
            RERANKER, ScoreRequest(Item(text="q"), [Item(text="a")], options={"overflow_policy": bad})
        ),
        engine.extract(
            RAMPART, ExtractRequest([Item(text="a")], ExtractParams(options={"overflow_policy": bad}))
        ),
    ]
    for call in calls:
        with pytest.raises(InvalidInput) as info:
            await call
        assert str(info.value) == message


async def test_every_policy_is_an_option_of_every_model(engine: Engine):
    """No 'unknown option' for a model whose family never mentions it."""
    for policy in POLICIES:
        params = EncodeParams(options={"overflow_policy": policy})
        answer = await engine.encode(MINILM, EncodeRequest([Item(text="a b c")], params), wait_loaded=True)
        assert answer.response.items[0].dense is not None
