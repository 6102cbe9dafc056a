"""Our ``sie-config`` and the public one side by side (the parity tests): both started over the same
bundles, catalogue and tokens, the same requests sent to each, the answers compared whole."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from sie.settings.common import PACKAGED_BUNDLES_DIR, PACKAGED_MODELS_DIR
from tests.e2e.cluster import ConfigService

ADMIN, READ = "admin-secret", "read-secret"
CATALOGUE = "sentence-transformers__all-MiniLM-L6-v2.yaml"
# (name, method, path, token, body, headers)
Step = tuple[str, str, str, str | None, Any, dict[str, str]]


@contextlib.contextmanager
def config_pair(
    root: Path,
    public_command: list[str],
    *,
    store: bool = True,
    bundles_dir: Path = PACKAGED_BUNDLES_DIR,
    baked: dict[str, str] | None = None,
) -> Iterator[tuple[ConfigService, ConfigService]]:
    """Ours and the public service, each with its own store (``store``) over one catalogue: the
    packaged MiniLM's file and ``baked`` (file name → YAML)."""
    models = root / "models"
    models.mkdir()
    (models / CATALOGUE).write_text((PACKAGED_MODELS_DIR / CATALOGUE).read_text())
    for name, text in (baked or {}).items():
        (models / name).write_text(text)
    started: list[ConfigService] = []
    try:
        for name, command in (("ours", None), ("public", public_command)):
            env = {
                "SIE_BUNDLES_DIR": str(bundles_dir),
                "SIE_MODELS_DIR": str(models),
                "SIE_ADMIN_TOKEN": ADMIN,
                "SIE_CONFIG_READ_TOKEN": READ,
            }
            if store:
                env["SIE_CONFIG_STORE_DIR"] = str(root / name / "store")
            service = ConfigService(root / name, env, command)
            service.start()
            started.append(service)
        yield started[0], started[1]
    finally:
        for service in started:
            service.client.close()
            service.stop()


def model(sie_id: str, **changes: Any) -> dict[str, Any]:
    """A whole config on the packaged MiniLM's weights."""
    config: dict[str, Any] = {
        "sie_id": sie_id,
        "hf_id": "sentence-transformers/all-MiniLM-L6-v2",
        "tasks": {"encode": {"dense": {"dim": 384}}},
        "max_sequence_length": 256,
        "profiles": {
            "default": {
                "max_batch_tokens": 8192,
                "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder",
            }
        },
    }
    config.update(changes)
    return config


def dump(config: Any) -> str:
    return yaml.safe_dump(config, sort_keys=False)


def normalize(name: str, response: httpx.Response, differences: dict[str, str]) -> Any:
    """A comparable answer: YAML parsed, an export's clock dropped, bundles of one priority by name,
    and for a step whose body differs by design (``differences``) only the error code."""
    kind = response.headers.get("content-type", "")
    if "yaml" in kind:
        return ("yaml", yaml.safe_load(response.text))
    body = response.json()
    if name.startswith("export"):
        body.pop("generated_at")
    if isinstance(body, dict) and isinstance(body.get("bundles"), list):
        # By priority both; the public service leaves ties in its directory's listing order.
        body["bundles"].sort(key=lambda b: (b["priority"], b["bundle_id"]))
    if name in differences:
        detail = body.get("detail", {})
        return detail.get("error") if isinstance(detail, dict) else detail
    return body


def compare(
    services: tuple[ConfigService, ConfigService],
    steps: list[Step],
    differences: dict[str, str] | None = None,
    ours_only: frozenset[str] = frozenset(),
) -> tuple[list[str], dict[str, tuple[int, Any]]]:
    """Every step whose status or normalized body differ between ours and the public service, and
    our answers by step name (status, normalized body). A step in ``ours_only`` is sent to ours alone
    (where the two differ by design and the public one's state would then differ too)."""
    found, ours = [], {}
    for name, method, path, token, body, headers in steps:
        answers = []
        for service in services[:1] if name in ours_only else services:
            sent = {**headers, **({"Authorization": f"Bearer {token}"} if token else {})}
            response = service.client.request(method, path, content=body, headers=sent)
            answers.append((response.status_code, normalize(name, response, differences or {})))
        ours[name] = answers[0]
        if name not in ours_only and answers[0] != answers[1]:
            found.append(f"{name}:\n  ours   {answers[0]}\n  public {answers[1]}")
    return found, ours
