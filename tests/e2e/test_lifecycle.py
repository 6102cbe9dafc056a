"""Many models on one server: least recently used models are evicted under memory pressure and reload
with identical outputs, a model with requests in flight is never evicted under them, idle models
unload after ``SIE_IDLE_EVICT_S``, and a corrupt weights file is a classified ``MODEL_LOAD_FAILED``
while the other models keep serving.

Memory pressure is made deterministic with ``SIE_MEMORY_LIMIT_BYTES`` (a budget for model weights):
each MiniLM-sized model holds 91 MB, so a 250 MB budget at the default 85 % threshold holds two.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import MODELS_DIR
from tests.e2e.conftest import MINILM, Server, dense_yaml, run_server

SRE = "senthilthepro/sre-embedding-model"
COPY = "test/minilm-copy"
TRUNCATED = "test/truncated"
TEXTS = ["which model answers this", "eviction keeps the most recently used models"]


def write_models(root: Path, minilm_dir: Path) -> Path:
    models = root / "models"
    models.mkdir()
    for name in ("sentence-transformers__all-MiniLM-L6-v2.yaml", "senthilthepro__sre-embedding-model.yaml"):
        shutil.copy(MODELS_DIR / name, models / name)
    broken = root / "truncated"
    shutil.copytree(minilm_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    for sie_id, folder, file in ((COPY, minilm_dir, "copy.yaml"), (TRUNCATED, broken, "truncated.yaml")):
        (models / file).write_text(dense_yaml(sie_id, folder))
    return models


@pytest.fixture(scope="module")
def lru_server(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("lru-server")
    env = {
        "SIE_MODELS_DIR": str(write_models(root, minilm_dir)),
        "SIE_DEFAULT_COMPUTE_PRECISION": "float32",
        "SIE_MEMORY_LIMIT_BYTES": str(250_000_000),
    }
    with run_server(root, env, "--preload", MINILM) as server:
        yield server


def state(server: Server, model: str) -> str:
    return str(server.client.get(f"/v1/models/{model}").json()["state"])


def encode(server: Server, model: str, texts: list[str] = TEXTS) -> np.ndarray:
    return server.encode_when_ready(texts, model)


def wait_for(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def test_least_recently_used_models_are_evicted_and_reload_the_same(lru_server: Server) -> None:
    first = encode(lru_server, MINILM)
    encode(lru_server, SRE)
    encode(lru_server, COPY)  # a third model: over the budget, so the least recently used goes
    wait_for(lambda: state(lru_server, MINILM) == "available")
    assert state(lru_server, SRE) == "loaded" and state(lru_server, COPY) == "loaded"
    assert (
        f"unloaded {MINILM} (model memory of a 250000000-byte budget over the threshold" in lru_server.log()
    )
    encode(lru_server, SRE)  # now COPY is the least recently used
    again = encode(lru_server, MINILM)
    wait_for(lambda: state(lru_server, COPY) == "available")
    assert state(lru_server, SRE) == "loaded" and state(lru_server, MINILM) == "loaded"
    np.testing.assert_array_equal(again, first)


def test_a_corrupt_weights_file_is_a_classified_load_failure_and_others_keep_serving(
    lru_server: Server,
) -> None:
    deadline = time.monotonic() + 60
    while (response := lru_server.encode_raw([{"text": "x"}], TRUNCATED)).status_code == 503:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert response.status_code == 502
    detail = response.json()["detail"]
    assert detail["code"] == "MODEL_LOAD_FAILED"
    assert (detail["error_class"], detail["permanent"], detail["attempts"]) == ("CORRUPT", True, 1)
    # The client is told the class; the loader's own words (and paths) are for the log only.
    assert detail["message"] == (
        f"Model '{TRUNCATED}' failed to load (CORRUPT): its weight files are corrupt or incomplete. "
        "The server's log has the detail."
    )
    assert "SafetensorError" in lru_server.log() and "incomplete metadata" in lru_server.log()
    info = lru_server.client.get(f"/v1/models/{TRUNCATED}").json()
    assert info["state"] == "failed" and info["last_error"]["code"] == "MODEL_LOAD_FAILED"
    assert encode(lru_server, SRE).shape == (2, 384)
    assert lru_server.process.poll() is None


@pytest.fixture(scope="module")
def tight_server(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Iterator[Server]:
    """A budget under one model: always under pressure, so only requests in flight keep a model."""
    root = tmp_path_factory.mktemp("tight-server")
    env = {
        "SIE_MODELS_DIR": str(write_models(root, minilm_dir)),
        "SIE_DEFAULT_COMPUTE_PRECISION": "float32",
        "SIE_MEMORY_LIMIT_BYTES": str(100_000_000),
        "SIE_IDLE_EVICT_S": "10",
        "SIE_MAX_CONCURRENT_REQUESTS": "4096",
    }
    with run_server(root, env, "--preload", MINILM) as server:
        yield server


def test_a_model_with_requests_in_flight_is_never_evicted_under_them(tight_server: Server) -> None:
    """The budget holds less than one model, so every other model is a victim as soon as it is idle;
    MiniLM, kept busy by requests in a loop, must stay loaded while another model loads beside it."""
    encode(tight_server, MINILM)
    stop = threading.Event()
    answered: list[int] = []

    def keep_busy() -> None:
        while not stop.is_set():
            answered.append(len(encode(tight_server, MINILM, [" ".join(["busy"] * 100)] * 16)))

    with ThreadPoolExecutor(3) as pool:
        busy = [pool.submit(keep_busy) for _ in range(2)]
        # The other model asks for room only once MiniLM's requests flow: a load that arrived before
        # the first of them would find MiniLM idle, and evicting it then is right.
        deadline = time.monotonic() + 60
        while not answered and time.monotonic() < deadline and not any(f.done() for f in busy):
            time.sleep(0.01)
        assert answered, "the busy loop never got an answer"
        loading = pool.submit(encode, tight_server, SRE)
        states: list[str] = []
        other_seen_loaded = False
        while not loading.done() or len(states) < 20:
            states.append(state(tight_server, MINILM))
            other_seen_loaded |= state(tight_server, SRE) == "loaded"
            time.sleep(0.05)
        stop.set()
        for future in busy:
            future.result()
    assert loading.result().shape == (2, 384)
    assert set(states) == {"loaded"}, states
    assert answered and set(answered) == {16}
    assert other_seen_loaded or f"loaded {SRE}" in tight_server.log()
    assert f"unloaded {MINILM}" not in tight_server.log()


def test_idle_models_unload_after_their_ttl(tight_server: Server) -> None:
    encode(tight_server, COPY)
    wait_for(lambda: all(state(tight_server, m) == "available" for m in (MINILM, SRE, COPY)), 25)
    assert "(idle for 10 s" in tight_server.log()
    assert encode(tight_server, COPY).shape == (2, 384)  # and it loads again on demand
