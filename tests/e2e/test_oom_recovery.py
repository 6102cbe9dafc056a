"""Out of memory in a batch, provoked on the CPU by a test adapter (a custom ``file.py:Class`` adapter
next to its YAML, as the public server allows) whose forward fails like a full GPU past a token cap:
the engine frees caches, evicts another model, splits the batch, and answers every item; an item that
cannot fit even alone gets ``503 RESOURCE_EXHAUSTED`` with ``Retry-After``; the server keeps serving."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import MODELS_DIR
from tests.e2e.conftest import MINILM, Server, dense_yaml, run_server, unpack_body

CAPPED = "test/capped"
SRE = "senthilthepro/sre-embedding-model"
TOKEN_CAP = 60

ADAPTER = '''
import torch

from sie.adapters.dense_torch import TorchDenseEncoder


class CappedDense(TorchDenseEncoder):
    """MiniLM whose forward runs out of memory past a token cap, as a full device would."""

    def __init__(self, spec):
        super().__init__(spec)
        self.cap = int(spec.loadtime["token_cap"])

    def run(self, batch, forward):
        tokens = sum(item.cost for item in batch)
        if tokens > self.cap:
            raise torch.OutOfMemoryError(f"out of memory: {tokens} tokens over a cap of {self.cap}")
        return super().run(batch, forward)
'''


@pytest.fixture(scope="module")
def oom_server(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("oom-server")
    models = root / "models"
    models.mkdir()
    for name in ("sentence-transformers__all-MiniLM-L6-v2.yaml", "senthilthepro__sre-embedding-model.yaml"):
        shutil.copy(MODELS_DIR / name, models / name)
    (models / "oom_adapter.py").write_text(ADAPTER)
    capped = dense_yaml(
        CAPPED, minilm_dir, "oom_adapter.py:CappedDense", f"{{loadtime: {{token_cap: {TOKEN_CAP}}}}}"
    )
    (models / "capped.yaml").write_text(capped)
    env = {"SIE_MODELS_DIR": str(models), "SIE_DEFAULT_COMPUTE_PRECISION": "float32"}
    with run_server(root, env, "--preload", f"{MINILM},{SRE},{CAPPED}") as server:
        yield server


def test_a_batch_that_runs_out_of_memory_is_split_after_freeing_caches_and_evicting(
    oom_server: Server,
) -> None:
    texts = [f"text number {i} about recovering from a full device" for i in range(8)]  # ~13 tokens each
    response = oom_server.encode_raw([{"text": t} for t in texts], CAPPED)
    assert response.status_code == 200, response.text
    got = np.stack([item["dense"]["values"] for item in unpack_body(response.content)["items"]])
    expected = oom_server.encode_when_ready(texts, MINILM)  # the same weights without the cap
    np.testing.assert_allclose(got, expected, atol=1e-5)
    log = oom_server.log()
    steps = [
        "out of memory in a batch of 8 items; freeing caches and running it again",
        f"(out of memory in a batch of {CAPPED}",
        "running the batch split",
    ]
    positions = [log.find(step) for step in steps]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), positions


def test_an_item_that_cannot_fit_alone_is_resource_exhausted_and_the_server_keeps_serving(
    oom_server: Server,
) -> None:
    long_text = " ".join(["far too many tokens"] * 30)
    response = oom_server.encode_raw([{"text": long_text}], CAPPED)
    assert response.status_code == 503
    assert response.json()["detail"]["code"] == "RESOURCE_EXHAUSTED"
    assert response.headers["retry-after"] == "5"
    ok = oom_server.encode_raw([{"text": "short"}], CAPPED)
    assert ok.status_code == 200
    oom_server.assert_serving()
