"""The chart rendered offline by Helm's own library (helm-python-sdk), as objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python
import yaml

from tests.conftest import REPO

CHART = REPO / "deploy" / "helm" / "sie-cluster"
GPU_VALUES = CHART / "values-gpu.yaml"
RELEASE, NAMESPACE = "sie", "search"


def render(values: dict[str, Any] | None = None, values_file: Path | None = None) -> list[dict[str, Any]]:
    given = yaml.safe_load(values_file.read_text()) if values_file else {}
    merged = _merge(given, values or {})
    out = helm_python.Chart.load(CHART).render(merged, name=RELEASE, namespace=NAMESPACE)
    return [doc for text in out.values() for doc in yaml.safe_load_all(text) if doc]


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = (
            _merge(merged[key], value)
            if isinstance(value, dict) and isinstance(merged.get(key), dict)
            else value
        )
    return merged


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, (
        f"{kind}/{name} not rendered once: {[(o['kind'], o['metadata']['name']) for o in objects]}"
    )
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """A container's env as name -> value (or the valueFrom map)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}
