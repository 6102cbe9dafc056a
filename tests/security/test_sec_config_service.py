"""sie-config under hostile or racing writers (audit M8, L1, L3, L4, L10, M2's resolve): a store that
never loses a write, 500s without internals, the body limit before the body is read, reads behind the
read token, and adapter paths only from the family table, at the API and at a follower.

The service runs in process (``httpx.ASGITransport`` on the app ``create_app`` builds); its store is a
real folder or a real S3 API (moto's server, ``tests/s3.py``)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sie.catalog.follower import ConfigFollower, FollowerSettings
from sie.catalog.model_config import ModelConfig
from sie.control.app import create_app
from sie.control.store import ConfigStore, EpochUnreadable, StoreConflict, file_name, model_id_of, storable
from sie.settings.control import ConfigServiceSettings
from tests.s3 import S3, moto_s3

ADMIN, READ, INFERENCE = "admin-secret", "read-secret", "inference-secret"
BUCKET = "sec-configs"
DENSE = "sie.adapters.dense_torch:TorchDenseEncoder"


def model_yaml(sie_id: str, adapter: str = DENSE, **extra: Any) -> str:
    config = {
        "sie_id": sie_id,
        "hf_id": "sentence-transformers/all-MiniLM-L6-v2",
        "tasks": {"encode": {"dense": {"dim": 384}}},
        "profiles": {"default": {"max_batch_tokens": 8192, "adapter_path": adapter}},
        **extra,
    }
    return yaml.safe_dump(config, sort_keys=False)


def settings(root: Path, **fields: Any) -> ConfigServiceSettings:
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)
    return ConfigServiceSettings(models_dir=str(models), **fields)


def client_of(config: ConfigServiceSettings, *, raise_errors: bool = True) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(config), raise_app_exceptions=raise_errors)
    return httpx.AsyncClient(transport=transport, base_url="http://config")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    with moto_s3(BUCKET) as server, mock.patch.dict(os.environ, server.env()):
        yield server


# -- M8: the store's file names ---------------------------------------------------------------
@pytest.mark.parametrize("model_id", ["a_/b", "a/_b", "a__b", "acme_/x/y", "acme/x/_y"])
async def test_ids_whose_file_name_another_id_shares_are_refused(tmp_path: Path, model_id: str) -> None:
    async with client_of(settings(tmp_path, config_store_dir=str(tmp_path / "store"))) as client:
        answer = await client.post("/v1/configs/models", content=model_yaml(model_id))
    assert answer.status_code == 400
    assert answer.json()["detail"]["error"] == "invalid_model_id"
    assert model_id in answer.json()["detail"]["message"]
    assert list((tmp_path / "store" / "models").iterdir()) == []


async def test_both_ids_of_the_audit_survive_a_restart_or_one_is_refused(tmp_path: Path) -> None:
    """The audit's loss: ``a_/b`` and ``a/_b`` were one file, and a restart kept one model."""
    store = str(tmp_path / "store")
    async with client_of(settings(tmp_path, config_store_dir=store)) as client:
        statuses = [
            (await client.post("/v1/configs/models", content=model_yaml(i))).status_code
            for i in ("a_/b", "a/_b")
        ]
        accepted = {i for i, status in zip(("a_/b", "a/_b"), statuses, strict=True) if status == 201}
    async with client_of(settings(tmp_path, config_store_dir=store, config_restore=True)) as client:
        listed = {m["model_id"] for m in (await client.get("/v1/configs/models")).json()["models"]}
    assert accepted <= listed  # whatever was answered 201 is still there
    assert statuses == [400, 400]


async def test_a_file_an_older_release_wrote_for_a_shared_name_is_restored_under_its_own_id(
    tmp_path: Path,
) -> None:
    """``a_/b`` stored by an older release (or the public service) is ``a___b.yaml``, which maps to
    ``a/_b``: the YAML's own sie_id says whose it is, and it can no longer be added to."""
    store = tmp_path / "store"
    ConfigStore(str(store))
    (store / "models" / "a___b.yaml").write_text(model_yaml("a_/b"))
    async with client_of(settings(tmp_path, config_store_dir=str(store), config_restore=True)) as client:
        listed = {m["model_id"] for m in (await client.get("/v1/configs/models")).json()["models"]}
        assert "a_/b" in listed and "a/_b" not in listed
        fast = {"fast": {"extends": "default", "max_batch_tokens": 2048}}
        answer = await client.post(
            "/v1/configs/models", content=yaml.safe_dump({"sie_id": "a_/b", "profiles": fast})
        )
        assert answer.status_code == 400 and answer.json()["detail"]["error"] == "invalid_model_id"


@given(st.text(alphabet="ab_/.", min_size=1, max_size=12).map(lambda s: "m" + s))
def test_every_storable_id_maps_to_its_own_file_name_and_back(model_id: str) -> None:
    if storable(model_id) is None:
        assert model_id_of(file_name(model_id)) == model_id
    else:
        assert "__" in model_id or "_/" in model_id or "/_" in model_id


# -- M8: conditional epoch writes -----------------------------------------------------------------
def race(stores: list[ConfigStore], seen: int) -> list[int | str]:
    """Every store advances the epoch from ``seen`` at once (a barrier lines the threads up)."""
    barrier = threading.Barrier(len(stores))
    outcomes: list[int | str] = [0] * len(stores)

    def advance(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = stores[index].advance_epoch(seen)
        except StoreConflict:
            outcomes[index] = "conflict"

    threads = [threading.Thread(target=advance, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


def folder(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def bucket(tmp_path: Path) -> str:
    return f"s3://{BUCKET}/{tmp_path.name}"


@pytest.mark.parametrize("where", [folder, bucket], ids=["folder", "s3"])
def test_writers_racing_for_one_epoch_one_wins_the_others_are_told(
    tmp_path: Path, s3: S3, where: Any
) -> None:
    location = where(tmp_path)
    for seen in range(3):
        outcomes = race([ConfigStore(location) for _ in range(4)], seen)
        assert sorted(outcomes, key=str) == [seen + 1, "conflict", "conflict", "conflict"]
        assert ConfigStore(location).read_epoch() == seen + 1
    with pytest.raises(StoreConflict):
        ConfigStore(location).advance_epoch(1)  # a writer that fell behind is told, not obeyed
    assert ConfigStore(location).read_epoch() == 3


@pytest.mark.parametrize("where", [folder, bucket], ids=["folder", "s3"])
def test_a_model_written_over_a_version_its_writer_did_not_read_is_refused(
    tmp_path: Path, s3: S3, where: Any
) -> None:
    first, second = ConfigStore(where(tmp_path)), ConfigStore(where(tmp_path))
    first.write_model("acme/a", "v1\n", expected=None)
    with pytest.raises(StoreConflict):
        second.write_model("acme/a", "v1-other\n", expected=None)  # it thought the model was new
    first.write_model("acme/a", "v2\n", expected="v1\n")
    with pytest.raises(StoreConflict):
        second.write_model("acme/a", "v2-other\n", expected="v1\n")
    assert second.read_model("acme/a") == "v2\n"


@pytest.mark.parametrize("where", [folder, bucket], ids=["folder", "s3"])
async def test_two_services_on_one_store_never_put_two_models_at_one_epoch(
    tmp_path: Path, s3: S3, where: Any
) -> None:
    """Two sie-config pods on one store (a rolling update): each started at epoch 0 and each adds a
    model, at once and then one after the other; every write gets an epoch of its own and a restart
    restores every answered write."""
    location = where(tmp_path)
    one, two = (
        client_of(settings(tmp_path, config_store_dir=location)),
        client_of(settings(tmp_path, config_store_dir=location)),
    )
    async with one, two:
        together = await asyncio.gather(
            one.post("/v1/configs/models", content=model_yaml("acme/one")),
            two.post("/v1/configs/models", content=model_yaml("acme/two")),
        )
        assert [answer.status_code for answer in together] == [201, 201]
        assert (await one.post("/v1/configs/models", content=model_yaml("acme/three"))).status_code == 201
        assert (await two.post("/v1/configs/models", content=model_yaml("acme/four"))).status_code == 201
        assert (await two.get("/v1/configs/epoch")).json()["epoch"] == 4
        # ``two`` lost a race for the epoch on its last write: it read every model back, so its
        # export at epoch 4 holds every write up to 4, not only its own.
        exported = {m["model_id"] for m in (await two.get("/v1/configs/export")).json()["models"]}
        assert {"acme/one", "acme/two", "acme/three", "acme/four"} <= exported
    assert ConfigStore(location).read_epoch() == 4
    async with client_of(settings(tmp_path, config_store_dir=location, config_restore=True)) as again:
        listed = {m["model_id"] for m in (await again.get("/v1/configs/models")).json()["models"]}
        assert {"acme/one", "acme/two", "acme/three", "acme/four"} <= listed
        assert (await again.get("/v1/configs/epoch")).json()["epoch"] == 4


async def test_a_profile_added_by_another_service_is_merged_not_overwritten(tmp_path: Path) -> None:
    """``two`` never saw ``acme/m``: its write of the model lands on what the store holds (the other
    service's ``fast``), never replaces it."""
    location = folder(tmp_path)
    one, two = (
        client_of(settings(tmp_path, config_store_dir=location)),
        client_of(settings(tmp_path, config_store_dir=location)),
    )
    default = {"max_batch_tokens": 8192, "adapter_path": DENSE}
    fast = {"extends": "default", "max_batch_tokens": 2048}
    slow = {"extends": "default", "max_batch_tokens": 512}
    async with one, two:
        assert (await one.post("/v1/configs/models", content=model_yaml("acme/m"))).status_code == 201
        body = yaml.safe_dump({"sie_id": "acme/m", "profiles": {"fast": fast}})
        assert (await one.post("/v1/configs/models", content=body)).status_code == 201
        body = model_yaml("acme/m", profiles={"default": default, "slow": slow})
        answer = await two.post("/v1/configs/models", content=body)
        assert answer.status_code == 201, answer.text
        assert answer.json()["created_profiles"] == ["slow"]
        assert answer.json()["existing_profiles_skipped"] == ["default"]
    stored = yaml.safe_load(ConfigStore(location).read_model("acme/m") or "")
    assert set(stored["profiles"]) == {"default", "fast", "slow"}
    assert ConfigStore(location).read_epoch() == 3


def test_an_unreadable_epoch_refuses_to_start_and_names_the_file(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ConfigStore(str(store))
    (store / "epoch").write_text("12 monkeys\n")
    with pytest.raises(EpochUnreadable, match=str(store / "epoch")):
        create_app(settings(tmp_path, config_store_dir=str(store)))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SIE_")},
        "SIE_CONFIG_STORE_DIR": str(store),
        "SIE_MODELS_DIR": str(tmp_path / "models"),
    }
    command = [str(Path(sys.executable).with_name("sie-config")), "serve", "--port", "0"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "12 monkeys" in done.stderr and str(store / "epoch") in done.stderr


# -- L1: a 500 keeps its internals in the log -----------------------------------------------------
async def test_a_server_error_answers_internal_error_and_logs_the_detail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "secret-volume-7f3a" / "store"
    async with client_of(settings(tmp_path, config_store_dir=str(store)), raise_errors=False) as client:
        models = store / "models"
        models.rmdir()
        models.write_text("not a folder")  # every model write now fails inside the store
        with caplog.at_level(logging.ERROR):
            answer = await client.post("/v1/configs/models", content=model_yaml("acme/a"))
    assert answer.status_code == 500
    assert answer.json() == {"detail": {"error": "internal_error", "message": "Internal server error"}}
    assert "secret-volume-7f3a" not in answer.text
    assert "secret-volume-7f3a" in caplog.text  # the operator still sees what failed


# -- L4: the body limit before the body ---------------------------------------------------------------
class Body:
    """A request body that counts what the server pulled of it."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total, self.chunk, self.pulled = total, chunk, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.pulled < self.total:
            self.pulled += self.chunk
            yield b"x" * self.chunk


@pytest.mark.parametrize("path", ["/v1/configs/models", "/v1/configs/resolve"])
async def test_a_huge_body_is_refused_before_it_is_read(tmp_path: Path, path: str) -> None:
    async with client_of(settings(tmp_path, admin_token=ADMIN)) as client:
        declared = Body(64 * 1024 * 1024)
        headers = {**bearer(ADMIN), "Content-Length": str(declared.total)}
        answer = await client.post(path, content=declared, headers=headers)
        assert answer.status_code == 413
        assert answer.json() == {
            "detail": {"error": "payload_too_large", "message": "Config body exceeds 1048576 bytes limit."}
        }
        assert declared.pulled == 0
        chunked = Body(64 * 1024 * 1024)
        answer = await client.post(path, content=chunked, headers=bearer(ADMIN))
        assert answer.status_code == 413 and answer.json()["detail"]["error"] == "payload_too_large"
        assert chunked.pulled <= 1024 * 1024 + 2 * chunked.chunk  # the limit and a chunk, never the rest


# -- L3, M2: the read token ----------------------------------------------------------------------------
async def test_with_a_read_token_reads_and_metrics_take_it_or_the_admin_token_only(tmp_path: Path) -> None:
    tokens = {"admin_token": ADMIN, "config_read_token": READ, "auth_token": INFERENCE}
    async with client_of(settings(tmp_path, **tokens)) as client:
        assert (
            await client.post("/v1/configs/models", content=model_yaml("acme/a"), headers=bearer(ADMIN))
        ).status_code == 201
        resolve = {"model": "acme/a"}
        for path in ("/v1/configs/models", "/v1/configs/epoch", "/v1/configs/export", "/metrics"):
            assert (await client.get(path, headers=bearer(READ))).status_code == 200, path
            assert (await client.get(path, headers=bearer(ADMIN))).status_code == 200, path
            refused = await client.get(path, headers=bearer(INFERENCE))
            assert (refused.status_code, refused.json()) == (403, {"detail": "Invalid token"}), path
            assert (await client.get(path)).status_code == 401, path
        answer = await client.post("/v1/configs/resolve", json=resolve, headers=bearer(READ))
        assert answer.status_code == 200 and answer.json()["resolved_bundle"] == "default"
        assert (
            await client.post("/v1/configs/resolve", json=resolve, headers=bearer(INFERENCE))
        ).status_code == 403
        written = await client.post("/v1/configs/models", content=model_yaml("acme/b"), headers=bearer(READ))
        assert written.status_code == 403  # a read token never writes


async def test_without_a_read_token_the_public_rules_hold(tmp_path: Path) -> None:
    async with client_of(settings(tmp_path, admin_token=ADMIN, auth_token=INFERENCE)) as client:
        assert (await client.get("/v1/configs/models", headers=bearer(INFERENCE))).status_code == 200
        assert (await client.get("/v1/configs/export", headers=bearer(INFERENCE))).status_code == 403
        assert (await client.get("/metrics")).status_code == 200  # open, as the public service's


# -- L10, H4: adapter paths from the family table ----------------------------------------------------------
@pytest.mark.parametrize(
    "adapter",
    [
        "sie.adapters.dense_torch:torch",  # a module attribute the loader would call .load on
        "sie.adapters.dense_torch:importlib",
        "adapter.py:Evil",  # a Python file the loader would execute
        "/tmp/evil.py:Evil",
    ],
)
async def test_the_api_refuses_an_adapter_path_outside_the_family_table(tmp_path: Path, adapter: str) -> None:
    async with client_of(settings(tmp_path)) as client:
        answer = await client.post("/v1/configs/models", content=model_yaml("acme/evil", adapter))
        assert 400 <= answer.status_code < 500
        assert answer.json()["detail"]["error"] == "validation_error"
        assert (await client.get("/v1/configs/models/acme/evil")).status_code == 404
        extends = {"fast": {"extends": "default", "adapter_path": adapter}}
        await client.post("/v1/configs/models", content=model_yaml("acme/good"))
        answer = await client.post(
            "/v1/configs/models", content=yaml.safe_dump({"sie_id": "acme/good", "profiles": extends})
        )
        assert answer.status_code == 422 and answer.json()["detail"]["error"] == "validation_error"


async def test_the_api_takes_every_class_path_of_the_family_table(tmp_path: Path) -> None:
    public = "sie_server.adapters.sentence_transformer:SentenceTransformerDenseAdapter"
    async with client_of(settings(tmp_path)) as client:
        for index, adapter in enumerate([DENSE, public]):
            answer = await client.post("/v1/configs/models", content=model_yaml(f"acme/m{index}", adapter))
            assert answer.status_code == 201, answer.text


async def test_a_follower_leaves_out_a_model_whose_adapter_path_is_not_in_the_family_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that holds a hostile config (written by hand, or by an older release) reaches the
    followers through the export: they keep it out, with one warning."""
    store = ConfigStore(str(tmp_path / "store"))
    store.write_model("acme/evil", model_yaml("acme/evil", "sie.adapters.dense_torch:torch"), expected=None)
    store.write_model("acme/file", model_yaml("acme/file", "evil.py:Evil"), expected=None)
    store.write_model("acme/good", model_yaml("acme/good"), expected=None)
    config = settings(tmp_path, config_store_dir=str(tmp_path / "store"), config_restore=True)
    transport = httpx.ASGITransport(app=create_app(config))
    applied: list[dict[str, ModelConfig]] = []

    async def apply(configs: dict[str, ModelConfig]) -> None:
        applied.append(configs)

    follower = ConfigFollower(
        FollowerSettings("http://config", None, 30, 0, ["sie-config"]), apply, "test", transport=transport
    )
    try:
        with caplog.at_level(logging.WARNING):
            await follower.sync()
            await follower.sync()  # the same export again: no second warning
    finally:
        await follower.close()
    assert set(follower.configs) == {"acme/good"}
    assert set(applied[-1]) == {"acme/good"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "acme/evil" in w]) == 1
    assert len([w for w in warnings if "acme/file" in w]) == 1
