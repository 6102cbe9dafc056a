"""Our ``sie-config`` and the public ``sie-config`` 0.10.1, side by side: the same sequence of
requests (reads, adds, merges, conflicts, bad YAML, idempotent replays, auth failures) to both, with
the same bundles, catalogue and tokens, must get the same statuses and bodies.

The public service needs Python 3.12 (``public_config_command`` in tests/conftest.py runs it from the
public venv, built on first use from requirements/public-lock.txt, or skips saying why). Where the two differ by design the step says so (``DIFFERENCES``); each is
also in docs/cluster.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from sie.settings.common import PACKAGED_BUNDLES_DIR, PACKAGED_MODELS_DIR
from tests.e2e.cluster import ConfigService

ADMIN, READ = "admin-secret", "read-secret"
CATALOGUE = "sentence-transformers__all-MiniLM-L6-v2.yaml"


@pytest.fixture(scope="module")
def services(
    tmp_path_factory: pytest.TempPathFactory, public_config_command: list[str]
) -> Iterator[tuple[ConfigService, ConfigService]]:
    root = tmp_path_factory.mktemp("parity")
    models = root / "models"
    models.mkdir()
    (models / CATALOGUE).write_text((PACKAGED_MODELS_DIR / CATALOGUE).read_text())
    started: list[ConfigService] = []
    try:
        for name, command in (("ours", None), ("public", public_config_command)):
            env = {
                "SIE_BUNDLES_DIR": str(PACKAGED_BUNDLES_DIR),
                "SIE_MODELS_DIR": str(models),
                "SIE_CONFIG_STORE_DIR": str(root / name / "store"),
                "SIE_ADMIN_TOKEN": ADMIN,
                "SIE_CONFIG_READ_TOKEN": READ,
            }
            service = ConfigService(root / name, env, command)
            service.start()
            started.append(service)
        yield started[0], started[1]
    finally:
        for service in started:
            service.client.close()
            service.stop()


def model(sie_id: str, **changes: Any) -> dict[str, Any]:
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


FAST = {"fast": {"extends": "default", "max_batch_tokens": 2048}}
UNROUTABLE = {"default": {"max_batch_tokens": 8192, "adapter_path": "nowhere.adapters.thing:Thing"}}
# (name, method, path, token, body, headers)
STEPS: list[tuple[str, str, str, str | None, Any, dict[str, str]]] = [
    ("read without a token", "GET", "/v1/configs/models", None, None, {}),
    ("read with a wrong token", "GET", "/v1/configs/models", "nope", None, {}),
    ("write with the read token", "POST", "/v1/configs/models", READ, dump(model("acme/a")), {}),
    ("write without a token", "POST", "/v1/configs/models", None, dump(model("acme/a")), {}),
    ("list the catalogue", "GET", "/v1/configs/models", READ, None, {}),
    ("epoch before any write", "GET", "/v1/configs/epoch", READ, None, {}),
    ("add a model", "POST", "/v1/configs/models", ADMIN, dump(model("acme/a")), {}),
    ("add it again", "POST", "/v1/configs/models", ADMIN, dump(model("acme/a")), {}),
    ("add with a key", "POST", "/v1/configs/models", ADMIN, dump(model("acme/b")), {"Idempotency-Key": "k1"}),
    ("replay the key", "POST", "/v1/configs/models", ADMIN, dump(model("acme/b")), {"Idempotency-Key": "k1"}),
    (
        "the key, another body",
        "POST",
        "/v1/configs/models",
        ADMIN,
        dump(model("acme/c")),
        {"Idempotency-Key": "k1"},
    ),
    (
        "a profile with other content",
        "POST",
        "/v1/configs/models",
        ADMIN,
        dump(
            model(
                "acme/a",
                profiles={
                    "default": {
                        "max_batch_tokens": 1024,
                        "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder",
                    }
                },
            )
        ),
        {},
    ),
    (
        "a changed top-level field",
        "POST",
        "/v1/configs/models",
        ADMIN,
        dump(model("acme/a", max_sequence_length=128)),
        {},
    ),
    (
        "append a profile",
        "POST",
        "/v1/configs/models",
        ADMIN,
        dump({"sie_id": "acme/a", "profiles": FAST}),
        {},
    ),
    (
        "append it again",
        "POST",
        "/v1/configs/models",
        ADMIN,
        dump({"sie_id": "acme/a", "profiles": FAST}),
        {},
    ),
    ("YAML that does not parse", "POST", "/v1/configs/models", ADMIN, "sie_id: [unclosed\n", {}),
    ("YAML that is a list", "POST", "/v1/configs/models", ADMIN, "- a\n- b\n", {}),
    ("an empty body", "POST", "/v1/configs/models", ADMIN, "", {}),
    ("an invalid model id", "POST", "/v1/configs/models", ADMIN, dump(model("bad id!")), {}),
    ("a model id ending in /status", "POST", "/v1/configs/models", ADMIN, dump(model("acme/status")), {}),
    ("a path-escaping model id", "POST", "/v1/configs/models", ADMIN, dump(model("acme/../x")), {}),
    ("an unknown field", "POST", "/v1/configs/models", ADMIN, dump(model("acme/d", colour="blue")), {}),
    (
        "an unknown profile field",
        "POST",
        "/v1/configs/models",
        ADMIN,
        dump(
            model(
                "acme/d",
                profiles={
                    "default": {
                        "max_batch_tokens": 8,
                        "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder",
                        "speed": 9,
                    }
                },
            )
        ),
        {},
    ),
    (
        "an adapter no bundle lists",
        "POST",
        "/v1/configs/models",
        ADMIN,
        dump(model("acme/d", profiles=UNROUTABLE)),
        {},
    ),
    ("no sie_id", "POST", "/v1/configs/models", ADMIN, dump({"profiles": FAST}), {}),
    ("no profiles", "POST", "/v1/configs/models", ADMIN, dump({"sie_id": "acme/e"}), {}),
    (
        "a bad profile name",
        "POST",
        "/v1/configs/models",
        ADMIN,
        dump(model("acme/e", profiles={"a:b": {"extends": "default"}})),
        {},
    ),
    ("a body over 1 MiB", "POST", "/v1/configs/models", ADMIN, "x: " + "y" * (1 << 20), {}),
    ("list after the writes", "GET", "/v1/configs/models", READ, None, {}),
    ("read an added model", "GET", "/v1/configs/models/acme/a", READ, None, {}),
    (
        "read a baked model",
        "GET",
        "/v1/configs/models/sentence-transformers/all-MiniLM-L6-v2",
        READ,
        None,
        {},
    ),
    ("read an unknown model", "GET", "/v1/configs/models/acme/zzz", READ, None, {}),
    ("epoch after the writes", "GET", "/v1/configs/epoch", READ, None, {}),
    ("bundles", "GET", "/v1/configs/bundles", READ, None, {}),
    ("one bundle", "GET", "/v1/configs/bundles/default", READ, None, {}),
    ("an unknown bundle", "GET", "/v1/configs/bundles/gpu", READ, None, {}),
    ("resolve", "POST", "/v1/configs/resolve", READ, '{"model": "acme/a"}', {}),
    ("resolve a variant", "POST", "/v1/configs/resolve", READ, '{"model": "acme/a:fast"}', {}),
    ("resolve in a bundle", "POST", "/v1/configs/resolve", READ, '{"model": "default:/acme/a"}', {}),
    ("resolve in the wrong bundle", "POST", "/v1/configs/resolve", READ, '{"model": "gpu:/acme/a"}', {}),
    ("resolve an unknown model", "POST", "/v1/configs/resolve", READ, '{"model": "acme/zzz"}', {}),
    ("resolve nothing", "POST", "/v1/configs/resolve", READ, "{}", {}),
    ("resolve bad JSON", "POST", "/v1/configs/resolve", READ, "{nope", {}),
    ("export with the read token", "GET", "/v1/configs/export", READ, None, {}),
    ("health", "GET", "/healthz", None, None, {}),
    ("ready", "GET", "/readyz", None, None, {}),
]

# Steps whose bodies differ by design: compared by status and error code only.
DIFFERENCES = {
    # The JSON parser's own words (orjson there, msgspec here) follow "Invalid JSON: ".
    "resolve bad JSON": "the parser's message",
}


def normalize(name: str, response: httpx.Response) -> Any:
    kind = response.headers.get("content-type", "")
    if "yaml" in kind:
        return ("yaml", yaml.safe_load(response.text))
    body = response.json()
    if name.startswith("export"):
        body.pop("generated_at")
    if name in DIFFERENCES:
        detail = body.get("detail", {})
        return detail.get("error") if isinstance(detail, dict) else detail
    return body


def test_our_config_service_answers_the_public_ones_request_sequence_alike(
    services: tuple[ConfigService, ConfigService],
) -> None:
    ours, theirs = services
    mismatches = []
    for name, method, path, token, body, headers in STEPS:
        answers = []
        for service in (ours, theirs):
            sent = {**headers, **({"Authorization": f"Bearer {token}"} if token else {})}
            response = service.client.request(method, path, content=body, headers=sent)
            answers.append((response.status_code, normalize(name, response)))
        if answers[0] != answers[1]:
            mismatches.append(f"{name}:\n  ours   {answers[0]}\n  public {answers[1]}")
    assert not mismatches, "\n".join(mismatches)
