"""The Stablebridge context pruner under its public id through a real server, JSON and msgpack.

The ``families`` server (tests/e2e/conftest.py) runs the shipped YAML on a tiny XLM-R reranker and a
pruning head built from configs (its head path pointed at the built folder). Its answers must equal
the adapter run in this process on the same weights (which tests/adapters/test_stablebridge.py holds
to transformers and torch): scores from ``/v1/score``, the summary and the labelled spans from
``/v1/extract`` under each profile, and the client's 400 for what it cannot take, after which the
server keeps serving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.stablebridge import NO_QUERY, StablebridgePruner
from sie.catalog.model_config import load_model_config
from sie.core.extraction import Entity
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task
from tests.e2e.conftest import DOCS, MSGPACK_HEADERS, QUERY, STABLEBRIDGE, Server, answered_alike

KEYS = {"id", "entities", "relations", "classifications", "objects", "data"}
PASSAGES = [*DOCS, "ok", "Salt, stress and genetics.\nAlso  age."]
YAML = "sugiv__stablebridge-pruner-highlighter.yaml"


def local(families_models: Path, family_folders: dict[str, Path], profile: str) -> tuple[Any, dict[str, Any]]:
    """The adapter on the server's weights and the profile's runtime options, from the same YAML."""
    config = load_model_config(families_models / YAML)
    resolved = config.resolve_profile(profile)
    spec = LoadSpec(
        family_folders["stablebridge"],
        "cpu",
        ComputePrecision.FLOAT32,
        config.max_sequence_length,
        loadtime=dict(resolved.loadtime),
        fetch=lambda hf_id, revision, path: Path(str(path)),
    )
    return StablebridgePruner.load(spec), dict(resolved.runtime)


def same_entities(got: list[dict[str, Any]], want: list[Entity]) -> None:
    assert [(e["text"], e["label"], e["start"], e["end"], e["bbox"]) for e in got] == [
        (e.text, e.label, e.start, e.end, None) for e in want
    ]
    np.testing.assert_allclose([e["score"] for e in got], [e.score for e in want], atol=1e-5)


def test_scores_are_the_rerankers(
    families: Server, families_models: Path, family_folders: dict[str, Path]
) -> None:
    adapter, _ = local(families_models, family_folders, "default")
    body: dict[str, Any] = {
        "query": {"text": QUERY},
        "items": [{"text": p, "id": f"p{i}"} for i, p in enumerate(PASSAGES)],
    }
    for instruction in (None, "Find the medical cause"):
        asked = {**body, "instruction": instruction} if instruction else body
        result = answered_alike(families, "score", STABLEBRIDGE, asked)
        assert list(result) == ["model", "query_id", "scores", "usage"] and result["model"] == STABLEBRIDGE
        forward = Forward(frozenset({Capability.SCORE}), task=Task(instruction=instruction))
        pairs = [(QUERY, p) for p in PASSAGES]
        expected = adapter.run(adapter.prepare(pairs, forward), forward).scores
        got = {s["item_id"]: s["score"] for s in result["scores"]}
        np.testing.assert_allclose([got[f"p{i}"] for i in range(len(PASSAGES))], expected, atol=1e-5)
        assert [s["rank"] for s in result["scores"]] == list(range(len(PASSAGES)))


@pytest.mark.parametrize(
    ("model", "profile", "options"),
    [
        (STABLEBRIDGE, "default", {}),
        (f"{STABLEBRIDGE}:aggressive", "aggressive", {}),
        (STABLEBRIDGE, "default", {"prune_threshold": 0.8, "highlight_threshold": 0.97}),
    ],
)
def test_extract_answers_the_summary_and_spans_as_the_adapter(
    families: Server,
    families_models: Path,
    family_folders: dict[str, Path],
    model: str,
    profile: str,
    options: dict[str, Any],
) -> None:
    """The instruction is the query; the profile's thresholds, overlaid by the request's."""
    adapter, runtime = local(families_models, family_folders, profile)
    body: dict[str, Any] = {"items": [{"text": p} for p in PASSAGES], "params": {"instruction": QUERY}}
    if options:
        body["params"]["options"] = options
    result = answered_alike(families, "extract", model, body)
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of([], {**runtime, **options}, QUERY))
    expected = adapter.run(adapter.prepare(PASSAGES, forward), forward).extractions or []
    assert len(result["items"]) == len(expected) == len(PASSAGES)
    for index, (item, want) in enumerate(zip(result["items"], expected, strict=True)):
        assert set(item) == KEYS and item["id"] == f"item-{index}"
        assert item["relations"] == item["classifications"] == item["objects"] == [] and item["data"] == {}
        same_entities(item["entities"], want.entities)
        summary, *spans = item["entities"]
        assert summary["label"] == "summary" and summary["start"] is None
        assert all(PASSAGES[index][s["start"] : s["end"]] == s["text"] for s in spans)
    labels = {s["label"] for item in result["items"] for s in item["entities"][1:]}
    assert labels == {"highlight", "kept", "pruned"}, labels  # the built head's answers are not vacuous


@pytest.mark.parametrize(
    ("params", "text", "message"),
    [
        ({}, "a passage", NO_QUERY),
        ({"instruction": "   "}, "a passage", NO_QUERY),
        (
            {"instruction": QUERY, "options": {"prune_threshold": 2}},
            "a passage",
            "Stablebridge pruner prune_threshold must be a finite number between 0 and 1",
        ),
        (
            {"instruction": QUERY, "options": {"highlight_threshold": "high"}},
            "a passage",
            "Stablebridge pruner highlight_threshold must be a finite number between 0 and 1",
        ),
        ({"instruction": QUERY}, "   ", "Stablebridge pruner needs a passage to prune: item 0 has no tokens"),
    ],
)
def test_what_the_pruner_cannot_take_is_the_clients_400(
    families: Server, unpack: Any, params: dict[str, Any], text: str, message: str
) -> None:
    body = {"items": [{"text": text}], "params": params}
    for sent in (
        families.client.post(f"/v1/extract/{STABLEBRIDGE}", json=body),
        families.client.post(
            f"/v1/extract/{STABLEBRIDGE}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
        ),
    ):
        assert sent.status_code == 400, sent.text
        as_json = sent.headers["content-type"].startswith("application/json")
        detail = sent.json()["detail"] if as_json else unpack(sent.content)["detail"]
        assert detail == {"code": "INVALID_INPUT", "message": message}
    families.assert_serving()
    good = {"items": [{"text": "salt"}], "params": {"instruction": QUERY}}
    (item,) = answered_alike(families, "extract", STABLEBRIDGE, good)["items"]
    assert [e["text"] for e in item["entities"][1:]] == ["salt"]


@pytest.mark.parametrize("policy", [None, "error"])
def test_a_pair_longer_than_the_model_reads_fails_alone(families: Server, policy: str | None) -> None:
    """That item's error in the public shape (never cut, whatever the policy), the other answered."""
    params: dict[str, Any] = {"instruction": QUERY}
    if policy:
        params["options"] = {"overflow_policy": policy}
    body = {"items": [{"text": " ".join(["salt"] * 700)}, {"text": "salt"}], "params": params}
    failed, answered = answered_alike(families, "extract", STABLEBRIDGE, body)["items"]
    assert failed["error"]["code"] == "INPUT_TOO_LONG" and failed["entities"] == []
    assert failed["error"]["message"] == (
        "The input takes 709 tokens, past the model's 599-token window, and options.overflow_policy is "
        "'error'. Shorten it, or send overflow_policy 'truncate_text'."
        if policy
        else "Stablebridge pruner reads at most 599 tokens of query and passage together; this pair has 709: "
        "split its text"
    )
    assert "error" not in answered and [e["text"] for e in answered["entities"][1:]] == ["salt"]


def test_an_unknown_option_is_refused_naming_the_pruners(families: Server) -> None:
    body = {"items": [{"text": "salt"}], "params": {"instruction": QUERY, "options": {"threshold": 0.5}}}
    response = families.client.post(f"/v1/extract/{STABLEBRIDGE}", json=body)
    assert response.status_code == 400, response.text
    message = response.json()["detail"]["message"]
    assert "Unknown option 'threshold'" in message and "highlight_threshold" in message
    assert "prune_threshold" in message
    families.assert_serving()
