"""PUT and DELETE of a model's config on our ``sie-config`` and the public ``sie-config`` 0.10.1, side
by side: the same sequence to both (replace, no-op replace, conflicts a POST would refuse, bad
bodies, idempotent replays, deletes of added, overridden, baked and unknown models), with the epoch,
the reads and the export compared after each stretch. Then the same two without a store, where a
DELETE is refused and a PUT does not move the epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control.parity import ADMIN, READ, Step, compare, config_pair, dump, model
from tests.e2e.cluster import ConfigService

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BAKED = "acme/baked"
PARTIAL = "acme/partial"  # its models-dir file has a profile of a family no bundle lists
M = "/v1/configs/models"
KEY = {"Idempotency-Key": "put-1"}
DANGLING = {"default": {"extends": "missing", "max_batch_tokens": 8}}
UNROUTABLE = {"default": {"max_batch_tokens": 8192, "adapter_path": "nowhere.adapters.thing:Thing"}}
FAST = {
    "default": {"max_batch_tokens": 8192, "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder"},
    "fast": {"extends": "default", "max_batch_tokens": 2048},
}
BAKED_CHANGED = model(
    BAKED,
    max_sequence_length=128,
    profiles={
        "default": {"max_batch_tokens": 4096, "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder"}
    },
)
WHISPER = "sie_server.adapters.whisper.adapter:WhisperAdapter"
SGLANG = "sie_server.adapters.sglang.generation:SGLangGenerationAdapter"
OCR = "sie_server.adapters.lighton_ocr.adapter:LightOnOCRAdapter"
UNLISTED = "sie_server.adapters.hologram.adapter:HologramAdapter"


def foreign(sie_id: str, adapter_path: str) -> dict[str, object]:
    """A config of a public family this release does not run."""
    return {
        "sie_id": sie_id,
        "hf_id": "acme/weights",
        "profiles": {"default": {"adapter_path": adapter_path, "max_batch_tokens": 4096}},
    }


NO_ID = {k: v for k, v in model("acme/b").items() if k != "sie_id"}

STEPS: list[Step] = [
    ("put without a token", "PUT", f"{M}/acme/a", None, dump(model("acme/a")), {}),
    ("put with the read token", "PUT", f"{M}/acme/a", READ, dump(model("acme/a")), {}),
    ("put a new model", "PUT", f"{M}/acme/a", ADMIN, dump(model("acme/a")), {}),
    ("epoch after the first put", "GET", "/v1/configs/epoch", READ, None, {}),
    ("put it again: a no-op", "PUT", f"{M}/acme/a", ADMIN, dump(model("acme/a")), {}),
    ("epoch after the no-op", "GET", "/v1/configs/epoch", READ, None, {}),
    ("put other content", "PUT", f"{M}/acme/a", ADMIN, dump(model("acme/a", max_sequence_length=128)), {}),
    ("put a profile more", "PUT", f"{M}/acme/a", ADMIN, dump(model("acme/a", profiles=FAST)), {}),
    ("post other content", "POST", M, ADMIN, dump(model("acme/a", max_sequence_length=64)), {}),
    ("read the replaced model", "GET", f"{M}/acme/a", READ, None, {}),
    ("resolve its new profile", "POST", "/v1/configs/resolve", READ, '{"model": "acme/a:fast"}', {}),
    ("put without sie_id", "PUT", f"{M}/acme/b", ADMIN, dump(NO_ID), {}),
    ("read the model put without sie_id", "GET", f"{M}/acme/b", READ, None, {}),
    ("put another model's sie_id", "PUT", f"{M}/acme/c", ADMIN, dump(model("acme/a")), {}),
    ("put YAML that does not parse", "PUT", f"{M}/acme/c", ADMIN, "sie_id: [unclosed\n", {}),
    ("put YAML that is a list", "PUT", f"{M}/acme/c", ADMIN, "- a\n", {}),
    ("put an unknown field", "PUT", f"{M}/acme/c", ADMIN, dump(model("acme/c", colour="blue")), {}),
    ("put no profiles", "PUT", f"{M}/acme/c", ADMIN, dump({"sie_id": "acme/c"}), {}),
    ("put a dangling extends", "PUT", f"{M}/acme/c", ADMIN, dump(model("acme/c", profiles=DANGLING)), {}),
    (
        "put an unroutable adapter",
        "PUT",
        f"{M}/acme/c",
        ADMIN,
        dump(model("acme/c", profiles=UNROUTABLE)),
        {},
    ),
    ("put an invalid path id", "PUT", f"{M}/bad id!", ADMIN, dump(model("acme/c")), {}),
    ("put a path id ending in /status", "PUT", f"{M}/acme/status", ADMIN, dump(model("acme/status")), {}),
    ("put with a key", "PUT", f"{M}/acme/d", ADMIN, dump(NO_ID), KEY),
    ("replay the key", "PUT", f"{M}/acme/d", ADMIN, dump(NO_ID), KEY),
    ("the key, the same body, another model", "PUT", f"{M}/acme/e", ADMIN, dump(NO_ID), KEY),
    ("the key on a POST", "POST", M, ADMIN, dump(NO_ID), KEY),
    ("put over a baked model", "PUT", f"{M}/{BAKED}", ADMIN, dump(BAKED_CHANGED), {}),
    ("read the overridden baked model", "GET", f"{M}/{BAKED}", READ, None, {}),
    ("list after the puts", "GET", M, READ, None, {}),
    ("epoch after the puts", "GET", "/v1/configs/epoch", READ, None, {}),
    ("export after the puts", "GET", "/v1/configs/export", ADMIN, None, {}),
    ("delete without a token", "DELETE", f"{M}/acme/b", None, None, {}),
    ("delete with the read token", "DELETE", f"{M}/acme/b", READ, None, {}),
    ("delete an added model", "DELETE", f"{M}/acme/b", ADMIN, None, {}),
    ("delete it again", "DELETE", f"{M}/acme/b", ADMIN, None, {}),
    ("read the deleted model", "GET", f"{M}/acme/b", READ, None, {}),
    ("resolve the deleted model", "POST", "/v1/configs/resolve", READ, '{"model": "acme/b"}', {}),
    ("delete the baked model's override", "DELETE", f"{M}/{BAKED}", ADMIN, None, {}),
    ("read the baked model again", "GET", f"{M}/{BAKED}", READ, None, {}),
    ("delete a baked model", "DELETE", f"{M}/{BAKED}", ADMIN, None, {}),
    ("delete an unknown model", "DELETE", f"{M}/acme/zzz", ADMIN, None, {}),
    ("delete an invalid id", "DELETE", f"{M}/acme/../x", ADMIN, None, {}),
    ("delete with a key", "DELETE", f"{M}/acme/a", ADMIN, None, {"Idempotency-Key": "del-1"}),
    ("replay the delete's key", "DELETE", f"{M}/acme/a", ADMIN, None, {"Idempotency-Key": "del-1"}),
    ("the delete's key on another model", "DELETE", f"{M}/acme/d", ADMIN, None, {"Idempotency-Key": "del-1"}),
    ("post the deleted model again", "POST", M, ADMIN, dump(model("acme/a")), {}),
    ("list after the deletes", "GET", M, READ, None, {}),
    ("epoch after the deletes", "GET", "/v1/configs/epoch", READ, None, {}),
    ("export after the deletes", "GET", "/v1/configs/export", ADMIN, None, {}),
    (
        "post a family we do not run (public default)",
        "POST",
        M,
        ADMIN,
        dump(foreign("acme/asr", WHISPER)),
        {},
    ),
    ("post a generative family (public sglang)", "POST", M, ADMIN, dump(foreign("acme/llm", SGLANG)), {}),
    ("put a family we do not run", "PUT", f"{M}/acme/ocr", ADMIN, dump(foreign("acme/ocr", OCR)), {}),
    ("post a family no bundle lists", "POST", M, ADMIN, dump(foreign("acme/new", UNLISTED)), {}),
    ("resolve a family we do not run", "POST", "/v1/configs/resolve", READ, '{"model": "acme/llm"}', {}),
    ("export with the foreign families", "GET", "/v1/configs/export", ADMIN, None, {}),
    (
        "put over a model with a profile no bundle lists",
        "PUT",
        f"{M}/{PARTIAL}",
        ADMIN,
        dump(model(PARTIAL)),
        {},
    ),
    # The public service re-checks the models dir's file before it deletes, finds a profile in no
    # bundle and answers 500 filesystem_fallback_invalid, deleting nothing: that override can never
    # go. Ours deletes it and serves the file as it did at start (that profile in no bundle, as then).
    ("delete that override", "DELETE", f"{M}/{PARTIAL}", ADMIN, None, {}),
    ("read that model again", "GET", f"{M}/{PARTIAL}", READ, None, {}),
]
OURS_ONLY = frozenset({"delete that override", "read that model again"})

WITHOUT_STORE: list[Step] = [
    ("put without a store", "PUT", f"{M}/acme/a", ADMIN, dump(model("acme/a")), {}),
    ("epoch without a store", "GET", "/v1/configs/epoch", READ, None, {}),
    ("delete without a store", "DELETE", f"{M}/acme/a", ADMIN, None, {}),
    ("export without a store", "GET", "/v1/configs/export", ADMIN, None, {}),
]


@pytest.fixture(scope="module")
def services(
    tmp_path_factory: pytest.TempPathFactory, public_config_command: list[str]
) -> Iterator[tuple[ConfigService, ConfigService]]:
    hologram = {"extends": "default", "adapter_path": UNLISTED}
    partial = model(PARTIAL, profiles={**model(PARTIAL)["profiles"], "hologram": hologram})
    baked = {"acme__baked.yaml": dump(model(BAKED)), "acme__partial.yaml": dump(partial)}
    with config_pair(tmp_path_factory.mktemp("replace"), public_config_command, baked=baked) as pair:
        yield pair


def test_put_and_delete_answer_as_the_public_service_does(
    services: tuple[ConfigService, ConfigService],
) -> None:
    found, ours = compare(services, STEPS, ours_only=OURS_ONLY)
    assert not found, "\n".join(found)
    # What both answered, so a route neither serves cannot pass as parity.
    assert ours["put a new model"] == (
        200,
        {
            "model_id": "acme/a",
            "replaced": True,
            "unchanged": False,
            "affected_bundles": ["default"],
            "warnings": [],
            "router_id": "standalone",
        },
    )
    assert ours["put it again: a no-op"][1]["unchanged"] is True
    assert ours["epoch after the no-op"][1]["epoch"] == ours["epoch after the first put"][1]["epoch"] == 1
    assert ours["post other content"][0] == 409  # what the PUTs did, a POST cannot: it only appends
    assert ours["put another model's sie_id"][1]["detail"]["error"] == "model_id_mismatch"
    assert ours["the key, the same body, another model"][1]["detail"]["error"] == "idempotency_mismatch"
    deleted = ours["delete an added model"][1]
    assert (deleted["deleted"], deleted["fallback"], deleted["distribution"]) == (True, None, "epoch_export")
    assert ours["delete it again"][1]["unchanged"] is True
    assert ours["read the deleted model"][0] == 404
    assert ours["delete the baked model's override"][1]["fallback"] == "filesystem"
    baked = ours["read the baked model again"][1][1]
    assert baked["max_sequence_length"] != 128  # the models dir's own config is back
    assert ours["delete a baked model"][1]["deleted"] is False
    exported = {m["model_id"] for m in ours["export after the deletes"][1]["models"]}
    assert exported == {MINILM, BAKED, PARTIAL, "acme/a", "acme/d"}
    # Accepted into the bundle that lists the family, as the public service does.
    assert ours["post a family we do not run (public default)"][1]["routable_bundles_by_profile"] == {
        "default": ["default"]
    }
    assert ours["post a generative family (public sglang)"][1]["routable_bundles_by_profile"] == {
        "default": ["sglang"]
    }
    assert ours["put a family we do not run"][1]["affected_bundles"] == ["transformers5"]
    assert ours["post a family no bundle lists"][0] == 422
    assert ours["delete that override"][1]["fallback"] == "filesystem"
    assert set(ours["read that model again"][1][1]["profiles"]) == {"default", "hologram"}


def test_without_a_store_delete_is_refused_and_put_keeps_the_epoch(
    tmp_path: Path, public_config_command: list[str]
) -> None:
    with config_pair(tmp_path, public_config_command, store=False) as pair:
        found, ours = compare(pair, WITHOUT_STORE)
    assert not found, "\n".join(found)
    assert ours["put without a store"][1]["replaced"] is True
    assert ours["epoch without a store"][1]["epoch"] == 0
    assert ours["delete without a store"][0] == 409
