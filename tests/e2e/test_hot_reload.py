"""Hot reload of the models dir while requests flow: a YAML added is served, a YAML changed takes
effect (its requests in flight finish on the old config), a YAML deleted is gone (404), a YAML that
does not parse changes nothing, and requests to the other models never fail meanwhile."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import MODELS_DIR
from tests.e2e.conftest import MINILM, Server, dense_yaml, run_server

ADDED = "test/hot-added"


def yaml_text(minilm_dir: Path, normalize: bool) -> str:
    return dense_yaml(ADDED, minilm_dir, options=f"{{runtime: {{normalize: {str(normalize).lower()}}}}}")


@pytest.fixture(scope="module")
def reload_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    root = tmp_path_factory.mktemp("hot-reload")
    models = root / "models"
    models.mkdir()
    shutil.copy(MODELS_DIR / "sentence-transformers__all-MiniLM-L6-v2.yaml", models)
    env = {"SIE_MODELS_DIR": str(models), "SIE_DEFAULT_COMPUTE_PRECISION": "float32"}
    with run_server(root, env) as server:
        yield server, models


def wait_for(check: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the reload did not take effect in time"
        time.sleep(0.1)


def test_added_changed_and_deleted_yamls_take_effect_while_requests_flow(
    reload_setup: tuple[Server, Path], minilm_dir: Path
) -> None:
    server, models = reload_setup
    statuses: list[int] = []
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            statuses.append(server.encode_raw([{"text": "requests keep flowing"}], MINILM).status_code)

    flow = threading.Thread(target=traffic)
    flow.start()
    try:
        path = models / "hot.yaml"
        path.write_text(yaml_text(minilm_dir, normalize=True))
        wait_for(lambda: server.client.get(f"/v1/models/{ADDED}").status_code == 200)
        (unit,) = server.encode_when_ready(["hot reload"], ADDED)
        assert abs(float(np.linalg.norm(unit)) - 1.0) < 1e-5

        path.write_text(yaml_text(minilm_dir, normalize=False))  # changed: raw vectors from now on
        wait_for(lambda: "changed ['test/hot-added']" in server.log())
        (raw,) = server.encode_when_ready(["hot reload"], ADDED)
        assert float(np.linalg.norm(raw)) > 1.5
        np.testing.assert_allclose(raw / np.linalg.norm(raw), unit, atol=1e-5)

        (models / "broken.yaml").write_text("sie_id: [not, a, string\n")
        wait_for(lambda: "does not parse; keeping the models being served" in server.log())
        assert server.encode_when_ready(["still here"], ADDED).shape == (1, 384)
        (models / "broken.yaml").unlink()

        path.unlink()
        wait_for(lambda: server.client.get(f"/v1/models/{ADDED}").status_code == 404)
        gone = server.encode_raw([{"text": "x"}], ADDED)
        assert gone.status_code == 404 and gone.json()["detail"]["code"] == "MODEL_NOT_FOUND"
    finally:
        stop.set()
        flow.join()
    assert statuses and set(statuses) == {200}
