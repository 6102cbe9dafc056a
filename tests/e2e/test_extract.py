"""``POST /v1/extract/{model}`` with GLiNER through a real server, over msgpack and JSON.

The ``families`` server (tests/e2e/conftest.py) serves a tiny GLiNER built over the packaged BERT
(``test/gliner``, named by the public adapter path, plus a ``merged`` profile). Its answers are held
to our adapter run in-process on the same weights (itself held to the ``gliner`` library in
tests/adapters/test_gliner.py); here the wire shape, ids, usage, options, profiles and errors are
checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.gliner import GlinerExtractor
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task
from tests import builders
from tests.e2e.conftest import GLINER, MINILM, MSGPACK_HEADERS, Server

LABELS = ["person", "location", "organization"]
TEXTS = [
    "Alice lives in Paris.",
    "Bob has worked at Google in Mountain View, California, since 2019, and before that at a bakery.",
]
RESULT_KEYS = {"id", "entities", "relations", "classifications", "objects", "data"}


@pytest.fixture(scope="module")
def adapter(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> GlinerExtractor:
    """The same seeded weights the server loads, built again here."""
    folder = builders.gliner(splade_dir, tmp_path_factory.mktemp("gliner"))
    return GlinerExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None))


def expected(
    adapter: GlinerExtractor, texts: list[str], options: dict[str, Any]
) -> list[list[dict[str, Any]]]:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, options))
    found = adapter.run(adapter.prepare(texts, forward), forward).extractions
    assert found is not None
    return [
        [
            {"text": e.text, "label": e.label, "score": e.score, "start": e.start, "end": e.end, "bbox": None}
            for e in one.entities
        ]
        for one in found
    ]


def extract(server: Server, body: dict[str, Any], *, as_json: bool, model: str = GLINER) -> Any:
    if as_json:
        response = server.client.post(
            f"/v1/extract/{model}", json=body, headers={"accept": "application/json"}
        )
    else:
        response = server.client.post(
            f"/v1/extract/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
        )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == ("application/json" if as_json else "application/msgpack")
    return response.json() if as_json else msgpack.unpackb(response.content)


def assert_entities(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert [{**e, "score": None} for e in got] == [{**e, "score": None} for e in want]
    assert [e["score"] for e in got] == pytest.approx([e["score"] for e in want], abs=1e-6)


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_extract_answers_what_the_adapter_finds(
    families: Server, adapter: GlinerExtractor, as_json: bool
) -> None:
    body = {"items": [{"text": TEXTS[0]}, {"text": TEXTS[1], "id": "b"}], "params": {"labels": LABELS}}
    answer = extract(families, body, as_json=as_json)
    assert set(answer) == {"model", "items", "usage"} and answer["model"] == GLINER
    assert [item["id"] for item in answer["items"]] == ["item-0", "b"]
    want = expected(adapter, TEXTS, {})
    assert any(want), "no entity clears the default threshold: the comparison would be vacuous"
    for item, entities, text in zip(answer["items"], want, TEXTS, strict=True):
        assert set(item) == RESULT_KEYS
        assert item["relations"] == item["classifications"] == item["objects"] == [] and item["data"] == {}
        assert_entities(item["entities"], entities)
        assert all(text[e["start"] : e["end"]] == e["text"] for e in item["entities"])
    tokens = sum(p.cost for p in adapter.prepare(TEXTS, Forward(frozenset(), task=Task.of(LABELS, {}))))
    assert answer["usage"] == {"input_tokens": tokens}


def test_usage_counts_tokens_like_the_public_server(families: Server) -> None:
    body = {"items": [{"text": "Alice lives in Paris."}], "params": {"labels": ["person", "location"]}}
    assert extract(families, body, as_json=False)["usage"] == {"input_tokens": 7}  # the captured answer


def test_threshold_option_is_respected(families: Server, adapter: GlinerExtractor) -> None:
    def found(threshold: float) -> list[list[dict[str, Any]]]:
        body = {
            "items": [{"text": t} for t in TEXTS],
            "params": {"labels": LABELS, "options": {"threshold": threshold}},
        }
        entities = [item["entities"] for item in extract(families, body, as_json=True)["items"]]
        for got, want in zip(entities, expected(adapter, TEXTS, {"threshold": threshold}), strict=True):
            assert_entities(got, want)
        return entities

    low, high = found(0.45), found(0.6)
    assert sum(map(len, high)) < sum(map(len, low))
    assert all(e["score"] >= 0.6 for item in high for e in item)


def test_profile_runtime_options_apply_and_a_request_overrides_them(
    families: Server, adapter: GlinerExtractor
) -> None:
    """``merged`` sets ``merge_adjacent_entities`` and threshold 0.45; the request's threshold wins."""
    body: dict[str, Any] = {"items": [{"text": TEXTS[1]}], "params": {"labels": LABELS}}
    (by_name,) = extract(families, body, as_json=True, model=f"{GLINER}:merged")["items"]
    assert_entities(
        by_name["entities"],
        expected(adapter, TEXTS[1:], {"merge_adjacent_entities": True, "threshold": 0.45})[0],
    )
    body["params"]["options"] = {"profile": "merged", "threshold": 0.55}
    (overridden,) = extract(families, body, as_json=False)["items"]
    want = expected(adapter, TEXTS[1:], {"merge_adjacent_entities": True, "threshold": 0.55})[0]
    assert_entities(overridden["entities"], want)


def refused(server: Server, model: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = server.client.post(
        f"/v1/extract/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
    )
    return response.status_code, response.json()


def test_no_labels_is_the_public_400(families: Server) -> None:
    status, body = refused(families, GLINER, {"items": [{"text": "Alice lives in Paris."}]})
    assert status == 400
    assert body == {
        "detail": {"code": "INVALID_INPUT", "message": "GLiNER requires labels parameter for extraction"}
    }
    families.assert_serving()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threshold": 2}, "GLiNER threshold must be a finite number between 0 and 1"),
        ({"multi_label": "yes"}, "GLiNER multi_label must be true or false"),
    ],
)
def test_bad_options_are_400(families: Server, options: dict[str, Any], message: str) -> None:
    body = {"items": [{"text": "Alice"}], "params": {"labels": ["person"], "options": options}}
    assert refused(families, GLINER, body) == (400, {"detail": {"code": "INVALID_INPUT", "message": message}})


def test_extract_on_an_embedding_model_is_the_public_400(families: Server) -> None:
    status, body = refused(families, MINILM, {"items": [{"text": "Alice"}], "params": {"labels": ["person"]}})
    assert status == 400
    assert body["detail"] == {
        "code": "INVALID_INPUT",
        "message": f"Model '{MINILM}' does not support extraction. Use an extraction model like GLiNER, "
        "GLiClass, or Florence-2.",
    }


def test_a_text_past_the_word_window_is_read_whole_and_one_past_128_windows_fails_alone(
    families: Server, adapter: GlinerExtractor
) -> None:
    """900 words (three windows of 384) through the server equal the adapter's windowed answer, with
    offsets into the whole text; a text needing more than 128 windows is that item's
    ``INPUT_TOO_LONG`` (tests/e2e/test_item_errors.py holds the items beside it), and the server keeps
    serving."""
    long_text = " ".join(
        ["Marie Curie was born in Warsaw and worked in Paris at the Sorbonne with Pierre."] * 60
    )
    body = {"items": [{"text": long_text}], "params": {"labels": LABELS, "options": {"threshold": 0.45}}}
    (item,) = extract(families, body, as_json=True)["items"]
    want = expected(adapter, [long_text], {"threshold": 0.45})[0]
    assert_entities(item["entities"], want)
    assert max(e["end"] for e in item["entities"]) > len(" ".join(long_text.split()[:384]))
    assert all(long_text[e["start"] : e["end"]] == e["text"] for e in item["entities"])

    too_long = " ".join(["word"] * (129 * 320 + 64))
    (item,) = extract(families, {"items": [{"text": too_long}], "params": {"labels": LABELS}}, as_json=True)[
        "items"
    ]
    assert item["error"]["code"] == "INPUT_TOO_LONG" and item["entities"] == []
    assert item["error"]["message"].startswith("GLiNER reads at most 128 windows of 384 words")
    families.assert_serving()
