"""Our ``sie-config`` and the public ``sie-config`` 0.10.1, side by side: the same sequence of
requests (reads, adds, merges, conflicts, bad YAML, idempotent replays, auth failures) to both, with
the same bundles, catalogue and tokens, must get the same statuses and bodies.

The public service needs Python 3.12 (``public_config_command`` in tests/conftest.py runs it from the
public venv, built on first use from requirements/public-lock.txt, or skips saying why). Where the two differ by design the step says so (``DIFFERENCES``); each is
also in docs/cluster.md.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.control.parity import ADMIN, READ, Step, compare, config_pair, dump, model
from tests.e2e.cluster import ConfigService


@pytest.fixture(scope="module")
def services(
    tmp_path_factory: pytest.TempPathFactory, public_config_command: list[str]
) -> Iterator[tuple[ConfigService, ConfigService]]:
    with config_pair(tmp_path_factory.mktemp("parity"), public_config_command) as pair:
        yield pair


FAST = {"fast": {"extends": "default", "max_batch_tokens": 2048}}
UNROUTABLE = {"default": {"max_batch_tokens": 8192, "adapter_path": "nowhere.adapters.thing:Thing"}}
STEPS: list[Step] = [
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


def test_our_config_service_answers_the_public_ones_request_sequence_alike(
    services: tuple[ConfigService, ConfigService],
) -> None:
    found, _ = compare(services, STEPS, DIFFERENCES)
    assert not found, "\n".join(found)
