"""The PUBLIC ``sie-sdk==0.10.1`` decodes our extract answers: Rampart's PII entities, the NLI model's
classifications, GLiNER2.5-Decide's typed decisions (its ``output_schema`` and a Laya state in an item's
metadata sent as the SDK sends them), GLiREL's relations (the SDK sends each item's ``metadata.entities`` as it is)
and GLiFormer's schema ``data`` and joint relations,
the values our server sends on the wire (tests/e2e/test_extract_families.py holds those to the
adapters). Runs in the public SDK's Python 3.12 venv, skipped where none exists.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import DECIDE, GLIFORMER, GLIREL, NLI, RAMPART, Server

PII = "My name is John Smith, email john.smith@example.com, I live in London."
TOPICS = "The central bank raised interest rates again."
LABELS = ["economy", "sports", "weather"]
RELATING = "Apple Inc. was founded by Steve Jobs in Cupertino."
NAMED = {
    "entities": [
        {"text": name, "label": "X", "start": RELATING.index(name), "end": RELATING.index(name) + len(name)}
        for name in ("Apple Inc.", "Steve Jobs", "Cupertino")
    ]
}
RELATIONS = ["founded by", "located in"]
QUESTIONS = {
    "intent": {
        "type": "choice",
        "instructions": "What is asked?",
        "criteria": {"refund": "money back", "info": ""},
    },
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["not", "somewhat", "very"]},
    "human": {"type": "noul", "instructions": "Needs a person?"},
}
STATE = {"order": 7, "status": "missing", "messages": ["where is my parcel?"]}
# What a Pydantic model's ``model_json_schema()`` gives (a ``$defs`` reference, a nullable field).
SCHEMA = {
    "$defs": {"Person": {"type": "object", "properties": {"who": {"type": "string"}}, "title": "Person"}},
    "type": "object",
    "title": "Record",
    "properties": {
        "name": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Name"},
        "people": {"type": "array", "items": {"$ref": "#/$defs/Person"}},
        "topic": {"enum": ["science", "business"], "type": "string"},
    },
}
GLIFORMER_TEXT = "Ada Lovelace worked with Charles Babbage in London on the Analytical Engine."
JOINT = {"threshold": 0.25, "relation_labels": ["lives in", "works at"]}

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from sie_sdk import SIEClient

    url, rampart, nli, pii, topics, labels, glirel, relating, named, relations = sys.argv[1:11]
    decide, questions, state, gliformer, schema, text, joint = sys.argv[11:18]
    with SIEClient(url, timeout_s=120) as client:
        found = client.extract(rampart, [{"text": pii, "id": "p"}])
        ranked = client.extract(nli, {"text": topics}, labels=json.loads(labels), options={"multi_label": True})
        related = client.extract(
            glirel, {"text": relating, "metadata": json.loads(named)}, labels=json.loads(relations)
        )
        decided = client.extract(
            decide,
            [{"text": topics}, {"metadata": {"state": json.loads(state)}}],
            output_schema=json.loads(questions),
        )
        structured = client.extract(gliformer, {"text": text}, output_schema=json.loads(schema), options={"threshold": 0.2})
        joined = client.extract(gliformer, {"text": text}, labels=["person", "city"], options=json.loads(joint))
    print(json.dumps({
        "rampart": [dict(r) for r in found],
        "nli": dict(ranked),
        "glirel": dict(related),
        "decide": [dict(d) for d in decided],
        "gliformer": [dict(structured), dict(joined)],
    }))
    """
)


@pytest.fixture(scope="module")
def public(families: Server, run_public_sdk: Any) -> dict[str, Any]:
    result: dict[str, Any] = run_public_sdk(
        SCRIPT,
        families.url,
        RAMPART,
        NLI,
        PII,
        TOPICS,
        json.dumps(LABELS),
        GLIREL,
        RELATING,
        json.dumps(NAMED),
        json.dumps(RELATIONS),
        DECIDE,
        json.dumps(QUESTIONS),
        json.dumps(STATE),
        GLIFORMER,
        json.dumps(SCHEMA),
        GLIFORMER_TEXT,
        json.dumps(JOINT),
    )
    return result


def wire(server: Server, model: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = httpx.post(
        f"{server.url}/v1/extract/{model}", json=body, headers={"accept": "application/json"}, timeout=60
    )
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def test_public_sdk_decodes_entities(families: Server, public: dict[str, Any]) -> None:
    (item,) = public["rampart"]
    assert item["id"] == "p"
    assert [(e["label"], e["text"]) for e in item["entities"]][2] == ("EMAIL", "john.smith@example.com")
    assert all(PII[e["start"] : e["end"]] == e["text"] for e in item["entities"])
    (expected,) = wire(families, RAMPART, {"items": [{"text": PII, "id": "p"}]})
    assert item["entities"] == expected["entities"]


def test_public_sdk_decodes_classifications(families: Server, public: dict[str, Any]) -> None:
    body = {"items": [{"text": TOPICS}], "params": {"labels": LABELS, "options": {"multi_label": True}}}
    (expected,) = wire(families, NLI, body)
    assert public["nli"]["classifications"] == expected["classifications"]
    assert sorted(c["label"] for c in public["nli"]["classifications"]) == sorted(LABELS)


def test_public_sdk_sends_item_metadata_and_decodes_relations(
    families: Server, public: dict[str, Any]
) -> None:
    body = {"items": [{"text": RELATING, "metadata": NAMED}], "params": {"labels": RELATIONS}}
    (expected,) = wire(families, GLIREL, body)
    assert expected["relations"], "the profile's threshold (0.1) keeps some of the built model's relations"
    assert public["glirel"]["relations"] == expected["relations"]
    assert [e["text"] for e in public["glirel"]["entities"]] == ["Apple Inc.", "Steve Jobs", "Cupertino"]


def test_public_sdk_sends_typed_questions_and_a_state_and_decodes_decisions(
    families: Server, public: dict[str, Any]
) -> None:
    body = {
        "items": [{"text": TOPICS}, {"metadata": {"state": STATE}}],
        "params": {"output_schema": QUESTIONS},
    }
    expected = wire(families, DECIDE, body)
    assert [item["data"] for item in public["decide"]] == [item["data"] for item in expected]
    for item in public["decide"]:
        assert list(item["data"]) == list(QUESTIONS)
        assert item["data"]["intent"]["choice"] in ("refund", "info")
        assert item["data"]["urgency"]["legend"] == {"0": "not", "1": "somewhat", "2": "very"}
        assert isinstance(item["data"]["human"]["answer"], bool)


def test_public_sdk_sends_a_pydantic_schema_and_relation_labels_to_gliformer(
    families: Server, public: dict[str, Any]
) -> None:
    structured, joined = public["gliformer"]
    body = {
        "items": [{"text": GLIFORMER_TEXT}],
        "params": {"output_schema": SCHEMA, "options": {"threshold": 0.2}},
    }
    (expected,) = wire(families, GLIFORMER, body)
    assert expected["data"], "the built model fills some of the schema at threshold 0.2"
    assert structured["data"] == expected["data"]
    assert set(structured["data"]) <= set(SCHEMA["properties"])
    body = {"items": [{"text": GLIFORMER_TEXT}], "params": {"labels": ["person", "city"], "options": JOINT}}
    (expected,) = wire(families, GLIFORMER, body)
    assert expected["relations"] and expected["entities"]
    assert joined["relations"] == expected["relations"] and joined["entities"] == expected["entities"]
