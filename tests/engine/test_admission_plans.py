"""An ``Admission`` keeps the plans it made per request shape: the same plan for the same shape, the
items still checked on every request, a refusal never kept, a bounded memo, none across catalogues."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sie.catalog import admission as admission_module
from sie.catalog.admission import Admission, RequestLimits
from sie.catalog.admit import admit_encode, admit_score
from sie.catalog.catalog import Catalog
from sie.catalog.errors import InvalidInput, ModelNotFound
from sie.core.options import Capability, OutputDType
from sie.engine.ops.parts import Parts
from sie.settings.common import PACKAGED_MODELS_DIR
from sie.wire.requests import EncodeParams, EncodeRequest, Item, ScoreRequest

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
RERANKER = "BAAI/bge-reranker-base"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.from_directory(PACKAGED_MODELS_DIR)


def request(text: str = "x", params: EncodeParams | None = None) -> EncodeRequest:
    return EncodeRequest(items=[Item(text=text)], params=params)


def test_one_plan_per_shape_and_a_new_one_for_another(catalog: Catalog) -> None:
    admission = Admission(catalog, RequestLimits(max_item_text_bytes=64))
    first = admit_encode(admission, MINILM, request("a"))
    assert admit_encode(admission, MINILM, request("another text")) is first
    query = EncodeParams(options={"is_query": True}, output_dtype="float16")
    asked = admit_encode(admission, MINILM, request(params=query))
    assert asked is not first and asked.plan.is_query and asked.plan.output_dtype is OutputDType.FLOAT16
    assert admit_encode(admission, MINILM, request(params=query)).plan == asked.plan
    assert first.plan.output_types == (Capability.DENSE,) and not first.plan.is_query


def test_the_items_are_checked_on_every_request_of_a_kept_shape(catalog: Catalog) -> None:
    admission = Admission(catalog, RequestLimits(max_item_text_bytes=64))
    admit_encode(admission, MINILM, request())
    with pytest.raises(InvalidInput, match="at most 64 bytes"):
        admit_encode(admission, MINILM, request("x" * 65))
    with pytest.raises(InvalidInput):
        admit_encode(admission, MINILM, EncodeRequest(items=[]))


def test_a_refused_shape_is_refused_every_time_and_not_kept(catalog: Catalog) -> None:
    admission = Admission(catalog, RequestLimits())
    bad = EncodeParams(output_dtype="float7")
    for _ in range(2):
        with pytest.raises(InvalidInput, match="Unknown output_dtype 'float7'"):
            admit_encode(admission, MINILM, request(params=bad))
        with pytest.raises(ModelNotFound):
            admit_encode(admission, "nobody/nothing", request())
    assert admission._plans == {}


def test_the_memo_is_bounded_and_skips_huge_shapes(catalog: Catalog, monkeypatch) -> None:
    monkeypatch.setattr(admission_module, "PLANS_KEPT", 4)
    admission = Admission(catalog, RequestLimits())
    for i in range(10):
        admit_encode(admission, MINILM, request(params=EncodeParams(instruction=f"instruction {i}")))
        assert len(admission._plans) <= 4
    huge = EncodeParams(instruction="y" * 2000)
    kept = dict(admission._plans)
    planned = admit_encode(admission, MINILM, request(params=huge))
    assert planned.plan.instruction == "y" * 2000 and admission._plans == kept


def test_a_score_keeps_its_plan_and_checks_its_items_every_time(catalog: Catalog) -> None:
    admission = Admission(catalog, RequestLimits())
    asked = ScoreRequest(query=Item(text="q"), items=[Item(text="d")])
    first = admit_score(admission, RERANKER, asked)
    again = admit_score(admission, RERANKER, ScoreRequest(query=Item(text="other"), items=[Item(text="e")]))
    assert again is first and first.plan.pairs
    with pytest.raises(InvalidInput, match="requires text"):
        admit_score(admission, RERANKER, ScoreRequest(query=Item(text="q"), items=[Item()]))
    with pytest.raises(InvalidInput, match="Unknown option"):
        admit_score(
            admission,
            RERANKER,
            ScoreRequest(query=Item(text="q"), items=[Item(text="d")], options={"nope": 1}),
        )
    assert len(admission._plans) == 1


def test_the_engine_keeps_one_admission_per_catalogue(catalog: Catalog) -> None:
    """Hot reload replaces the registry's catalogue: the engine's admission, and its plans, with it."""
    registry = SimpleNamespace(catalog=catalog)
    parts = Parts(registry, None, None, RequestLimits())  # type: ignore[arg-type]
    first = parts.admission
    admit_encode(first, MINILM, request())
    assert parts.admission is first and first._plans
    registry.catalog = Catalog([entry for entry in catalog.entries() if entry.name != MINILM])
    assert parts.admission is not first and parts.admission.catalog is registry.catalog
    with pytest.raises(ModelNotFound):
        admit_encode(parts.admission, MINILM, request())
