"""The cluster cache and an S3 models directory through a real server and a real S3 API.

moto's standalone S3 server runs on loopback in the test process; the ``sie-server`` process finds it
through ``AWS_ENDPOINT_URL`` with dummy credentials, and reads both its model YAMLs
(``SIE_MODELS_DIR=s3://models/catalog``) and its weights (``SIE_CLUSTER_CACHE=s3://weights/hub``) from
it. The local cache starts empty and the Hub is off, so a model that loads came from the bucket. The
bucket's model is the packaged MiniLM under an id no package ships (``test/minilm-cluster``): its
vectors must equal the packaged model's, served by the same process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import MODELS_DIR
from tests.e2e.conftest import MODEL, READY_TIMEOUT_S, Server, run_server
from tests.s3 import S3, hub_prefix, moto_s3

CLUSTER = "test/minilm-cluster"  # in the bucket; copied on first use
CLUSTER_LATER = "test/minilm-cluster-later"  # in the bucket; first asked for once the store is down
ABSENT = "test/minilm-absent"  # nowhere
REVISION = "0123abcd"
TEXTS = ["a model copied from the cluster cache", "weights in three tiers"]


def yaml_for(model_id: str) -> bytes:
    """The shipped MiniLM YAML under another id (same adapter and options)."""
    text = (MODELS_DIR / "sentence-transformers__all-MiniLM-L6-v2.yaml").read_text()
    return (
        text.replace(f"sie_id: {MODEL}", f"sie_id: {model_id}")
        .replace(f"hf_id: {MODEL}", f"hf_id: {model_id}")
        .encode()
    )


@pytest.fixture(scope="module")
def s3(minilm_dir: Path) -> Iterator[S3]:
    with moto_s3("weights", "models") as running:
        for model_id in (CLUSTER, CLUSTER_LATER):
            running.upload_folder(minilm_dir, "weights", hub_prefix("hub", model_id, REVISION))
        running.put(
            "models",
            "catalog/minilm.yaml",
            (MODELS_DIR / "sentence-transformers__all-MiniLM-L6-v2.yaml").read_bytes(),
        )
        for model_id in (CLUSTER, CLUSTER_LATER, ABSENT):
            running.put("models", f"catalog/{model_id.replace('/', '__')}.yaml", yaml_for(model_id))
        yield running


@pytest.fixture(scope="module")
def local_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sie-local-cache")


@pytest.fixture(scope="module")
def cluster_server(s3: S3, local_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {
        **s3.env(),
        "SIE_MODELS_DIR": "s3://models/catalog",
        "SIE_LOCAL_CACHE": str(local_cache),
        "SIE_DEFAULT_COMPUTE_PRECISION": "float32",
    }
    with run_server(
        tmp_path_factory.mktemp("sie-cluster-server"),
        env,
        "--cluster-cache",
        "s3://weights/hub",
        "--no-hf-fallback",
    ) as running:
        yield running


def encode_when_loaded(server: Server, model: str) -> Any:
    deadline = time.monotonic() + READY_TIMEOUT_S
    response = server.encode_raw([{"text": t} for t in TEXTS], model)
    while response.status_code == 503 and time.monotonic() < deadline:
        assert response.json()["detail"]["code"] == "MODEL_LOADING"
        time.sleep(0.1)
        response = server.encode_raw([{"text": t} for t in TEXTS], model)
    return response


def test_models_dir_in_a_bucket_is_listed(cluster_server: Server) -> None:
    names = [m["name"] for m in cluster_server.client.get("/v1/models").json()["models"]]
    ids = [MODEL, CLUSTER, CLUSTER_LATER, ABSENT]
    # Each is a copy of the shipped MiniLM YAML, whose public Candle profile is a variant id too.
    assert sorted(names) == sorted(ids + [f"{i}:candle" for i in ids])


def test_a_model_missing_locally_is_copied_from_the_cluster_cache_then_served(
    cluster_server: Server, local_cache: Path
) -> None:
    snapshot = local_cache / "models--test--minilm-cluster" / "snapshots" / REVISION
    assert not snapshot.exists()
    response = encode_when_loaded(cluster_server, CLUSTER)
    assert response.status_code == 200, response.text
    assert (snapshot / "model.safetensors").is_file() and not (snapshot / "README.md").exists()
    copied = [np.asarray(v) for v in cluster_server.encode(TEXTS, CLUSTER)]
    packaged = [np.asarray(v) for v in cluster_server.encode(TEXTS, MODEL)]
    for a, b in zip(copied, packaged, strict=True):
        np.testing.assert_array_equal(a, b)
    log = cluster_server.log()
    assert f"copying {CLUSTER}@{REVISION} from the cluster cache s3://weights/hub:" in log
    assert "(100 %), 12 of 12 files, done in" in log


def load_failure(server: Server, model: str) -> dict[str, Any]:
    response = encode_when_loaded(server, model)
    assert response.status_code == 502, response.text
    detail: dict[str, Any] = response.json()["detail"]
    assert detail["code"] == "MODEL_LOAD_FAILED"
    return detail


def test_a_model_in_no_tier_fails_naming_every_tier_in_the_log(
    cluster_server: Server, local_cache: Path
) -> None:
    """The client is told the class; the operator's log names every tier (audit L2: no cache path or
    bucket URL in an answer)."""
    detail = load_failure(cluster_server, ABSENT)
    assert detail["permanent"] is True and detail["error_class"] == "NOT_FOUND"
    assert detail["message"] == (
        f"Model '{ABSENT}' failed to load (NOT_FOUND): its weights are in none of the places this server "
        "is configured to look. The server's log has the detail."
    )
    assert (
        f"no weights for '{ABSENT}'; tried: "
        "packages (none ships this model); "
        f"local cache {local_cache}/models--test--minilm-absent/snapshots (no snapshot); "
        "cluster cache s3://weights/hub/models--test--minilm-absent/snapshots (no snapshot); "
        f"hub download of '{ABSENT}' (disabled: hf_fallback is off)"
    ) in cluster_server.log()


def test_cluster_cache_down_with_fallback_off_is_a_clear_transient_failure(
    cluster_server: Server, s3: S3
) -> None:
    """Last in this module: it stops the S3 server."""
    s3.server.stop()
    detail = load_failure(cluster_server, CLUSTER_LATER)
    assert detail["message"] == (
        f"Model '{CLUSTER_LATER}' failed to load (NETWORK): a source of its weights could not be reached. "
        "The server's log has the detail."
    )
    assert detail["error_class"] == "NETWORK"
    log = cluster_server.log()
    assert f"no weights for '{CLUSTER_LATER}'; tried: packages (none ships this model); local cache " in log
    assert (
        "cluster cache s3://weights/hub/models--test--minilm-cluster-later/snapshots "
        "(unreachable: EndpointConnectionError: Could not connect to the endpoint URL" in log
    )
    assert f"hub download of '{CLUSTER_LATER}' (disabled: hf_fallback is off)" in log
    assert detail["permanent"] is False  # the store may come back
    # The model copied before keeps serving from the local cache.
    assert len(cluster_server.encode(TEXTS, CLUSTER)) == 2
    cluster_server.assert_serving()
