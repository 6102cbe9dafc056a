"""The config store on a folder and on a real S3 API (moto), and sie-config restoring from it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import yaml

from sie.control.store import ConfigStore, EpochUnreadable, StoreError
from tests.e2e.cluster import run_config_service
from tests.s3 import S3, moto_s3

BUCKET = "configs"
CONFIG = {
    "sie_id": "acme/a",
    "hf_id": "sentence-transformers/all-MiniLM-L6-v2",
    "tasks": {"encode": {"dense": {"dim": 384}}},
    "profiles": {
        "default": {"max_batch_tokens": 8192, "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder"}
    },
}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    with moto_s3(BUCKET) as server:
        yield server


def test_a_folder_store_writes_whole_readable_files_and_maps_ids(tmp_path: Path) -> None:
    store = ConfigStore(str(tmp_path / "store"))
    assert store.read_epoch() == 0 and store.model_ids() == []
    for seen in range(7):
        assert store.advance_epoch(seen) == seen + 1
    store.write_model("acme/a", "sie_id: acme/a\n", expected=None)
    store.write_model("acme/a", "sie_id: acme/a\nhf_id: x\n", expected="sie_id: acme/a\n")  # replaced whole
    files = sorted(p.name for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert files == [".lock", "acme__a.yaml", "epoch"]  # no temporary file left behind
    path = tmp_path / "store" / "models" / "acme__a.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert store.read_epoch() == 7 and store.model_ids() == ["acme/a"]
    assert store.load_all() == {"acme/a": "sie_id: acme/a\nhf_id: x\n"}
    with pytest.raises(StoreError, match="reserved sequence '__'"):
        store.write_model("acme__a", "x", expected=None)
    (tmp_path / "store" / "epoch").write_text("garbage")
    with pytest.raises(EpochUnreadable, match="garbage"):  # no longer read as 0 (tests/security)
        store.read_epoch()


def test_an_s3_store_holds_models_and_the_epoch(s3: S3) -> None:
    with mock.patch.dict(os.environ, s3.env()):
        store = ConfigStore(f"s3://{BUCKET}/unit")
        for seen in range(3):
            store.advance_epoch(seen)
        store.write_model("acme/a", yaml.safe_dump(CONFIG), expected=None)
        again = ConfigStore(f"s3://{BUCKET}/unit")
        assert again.read_epoch() == 3
        assert again.model_ids() == ["acme/a"]
        assert yaml.safe_load(again.read_model("acme/a") or "") == CONFIG
        assert again.delete_model("acme/a") and again.model_ids() == []


def test_sie_config_restores_its_s3_store_at_start(tmp_path: Path, s3: S3) -> None:
    env = {**s3.env(), "SIE_CONFIG_STORE_DIR": f"s3://{BUCKET}/service", "SIE_CONFIG_RESTORE": "true"}
    with run_config_service(tmp_path / "first", env) as service:
        assert service.post(yaml.safe_dump(CONFIG)).status_code == 201
        assert service.client.get("/v1/configs/epoch").json()["epoch"] == 1
    with run_config_service(tmp_path / "second", env) as service:
        assert service.client.get("/v1/configs/epoch").json()["epoch"] == 1
        listed = service.client.get("/v1/configs/models").json()["models"]
        assert {"model_id": "acme/a", "profiles": ["default"], "source": "api"} in listed
        assert yaml.safe_load(service.client.get("/v1/configs/models/acme/a").text) == CONFIG
        # An identical post after the restart is a replay, not a new profile.
        replay = service.post(yaml.safe_dump(CONFIG))
        assert replay.status_code == 200 and replay.json()["existing_profiles_skipped"] == ["default"]
