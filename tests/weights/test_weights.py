"""The weight tiers in order (packages, local cache, cluster cache, Hub) on real folders, packages and
a real S3 API (moto's server), and the two miss types: not found vs unavailable."""

import filecmp
from pathlib import Path

import pytest

from sie.weights.packaged import PACKAGED, PackagedWeights
from sie.weights.sources import WeightsNotFound, WeightSources, WeightsUnavailable
from tests.s3 import hub_prefix, moto_s3

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
CLUSTER_ID = "test/minilm-cluster"  # in no package: only the cluster cache has it


def test_packaged_weights_resolve_offline(tmp_path, minilm_dir):
    sources = WeightSources(local_cache=tmp_path, hf_fallback=False)
    assert sources.resolve("sentence-transformers/all-MiniLM-L6-v2", None) == minilm_dir


def test_package_wins_over_local_and_cluster_cache(tmp_path, minilm_dir):
    for root in ("local", "cluster"):
        (tmp_path / root / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / "abc").mkdir(
            parents=True
        )
    sources = WeightSources(tmp_path / "local", hf_fallback=False, cluster_cache=str(tmp_path / "cluster"))
    assert sources.resolve(MINILM, None) == minilm_dir


def snapshot_of(root: Path, hf_id: str, revision: str) -> Path:
    return root / f"models--{hf_id.replace('/', '--')}" / "snapshots" / revision


def cluster_folder(root: Path, minilm_dir: Path, revision: str = "abc123") -> Path:
    """A plain-folder cluster cache holding the packaged MiniLM under CLUSTER_ID, plus a README."""
    snapshot = snapshot_of(root, CLUSTER_ID, revision)
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(minilm_dir, target_is_directory=True)
    return snapshot


def test_local_cache_wins_over_cluster_cache(tmp_path, minilm_dir):
    local = snapshot_of(tmp_path / "local", CLUSTER_ID, "old")
    local.mkdir(parents=True)
    cluster_folder(tmp_path / "cluster", minilm_dir)
    sources = WeightSources(tmp_path / "local", hf_fallback=False, cluster_cache=str(tmp_path / "cluster"))
    assert sources.resolve(CLUSTER_ID, None) == local
    assert list(local.parent.iterdir()) == [local]  # nothing copied


def test_cluster_folder_is_copied_into_the_local_cache_then_served_from_there(tmp_path, minilm_dir):
    cluster_folder(tmp_path / "cluster", minilm_dir)
    sources = WeightSources(tmp_path / "local", hf_fallback=False, cluster_cache=str(tmp_path / "cluster"))
    copied = sources.resolve(CLUSTER_ID, None)
    assert copied == snapshot_of(tmp_path / "local", CLUSTER_ID, "abc123")
    shipped = sorted(p.relative_to(minilm_dir) for p in minilm_dir.rglob("*") if p.is_file())
    kept = sorted(p.relative_to(copied) for p in copied.rglob("*") if p.is_file())
    assert kept == [p for p in shipped if not p.name.startswith("README")]
    assert all(filecmp.cmp(minilm_dir / p, copied / p, shallow=False) for p in kept)
    # The cluster cache gone, the local copy answers.
    gone = WeightSources(tmp_path / "local", hf_fallback=False, cluster_cache=str(tmp_path / "nowhere"))
    assert gone.resolve(CLUSTER_ID, None) == copied


def test_cluster_revision_from_the_yaml_or_refs_main(tmp_path, minilm_dir):
    cluster = tmp_path / "cluster"
    cluster_folder(cluster, minilm_dir, "aaa")
    snapshot_of(cluster, CLUSTER_ID, "bbb").symlink_to(minilm_dir, target_is_directory=True)
    snapshot_of(cluster, CLUSTER_ID, "ccc").symlink_to(minilm_dir, target_is_directory=True)
    (cluster / "models--test--minilm-cluster" / "refs").mkdir()
    (cluster / "models--test--minilm-cluster" / "refs" / "main").write_text("bbb\n")
    sources = WeightSources(tmp_path / "local", hf_fallback=False, cluster_cache=str(cluster))
    assert sources.resolve(CLUSTER_ID, None, revision="aaa").name == "aaa"
    fresh = WeightSources(tmp_path / "local2", hf_fallback=False, cluster_cache=str(cluster))
    assert fresh.resolve(CLUSTER_ID, None).name == "bbb"
    assert (tmp_path / "local2" / "models--test--minilm-cluster" / "refs" / "main").read_text() == "bbb"
    # A pinned revision nobody has is a miss, not another revision.
    with pytest.raises(WeightsNotFound, match=r"cluster cache .*/snapshots \(no snapshot\)"):
        fresh.resolve(CLUSTER_ID, None, revision="zzz")
    assert fresh.resolve(CLUSTER_ID, None, revision="main").name == "bbb"  # a ref, read locally now


def test_a_copy_in_progress_is_not_a_snapshot(tmp_path):
    (snapshot_of(tmp_path, CLUSTER_ID, ".abc.partial-123")).mkdir(parents=True)
    with pytest.raises(WeightsNotFound):
        WeightSources(tmp_path, hf_fallback=False).resolve(CLUSTER_ID, None)


def test_s3_cluster_cache_is_copied_through_a_real_s3_api(tmp_path, minilm_dir, monkeypatch):
    with moto_s3("weights") as s3:
        for key, value in s3.env().items():
            monkeypatch.setenv(key, value)
        uploaded = s3.upload_folder(minilm_dir, "weights", hub_prefix("hub", CLUSTER_ID, "abc123"))
        sources = WeightSources(tmp_path, hf_fallback=False, cluster_cache="s3://weights/hub")
        copied = sources.resolve(CLUSTER_ID, None)
        assert copied == snapshot_of(tmp_path, CLUSTER_ID, "abc123")
        files = [p for p in copied.rglob("*") if p.is_file()]
        assert len(files) == uploaded - 1  # the README stayed behind
        assert all(filecmp.cmp(minilm_dir / p.relative_to(copied), p, shallow=False) for p in files)

        with pytest.raises(WeightsNotFound) as info:
            sources.resolve("test/absent", None)
        assert "cluster cache s3://weights/hub/models--test--absent/snapshots (no snapshot)" in str(
            info.value
        )

        s3.server.stop()
        with pytest.raises(WeightsUnavailable) as down:
            sources.resolve("test/other", None)
    message = str(down.value)
    assert isinstance(down.value, ConnectionError)
    assert message.startswith(
        "no weights for 'test/other'; tried: packages (none ships this model); local cache"
    )
    assert (
        "cluster cache s3://weights/hub/models--test--other/snapshots (unreachable: EndpointConnectionError"
        in message
    )
    assert message.endswith("hub download of 'test/other' (disabled: hf_fallback is off)")


def test_a_cluster_copy_makes_room_on_a_full_disk_sparing_models_in_use(tmp_path, minilm_dir):
    local = tmp_path / "local"
    for hf_id in ("org/idle", "org/loaded"):
        snapshot_of(local, hf_id, "r").mkdir(parents=True)
    cluster_folder(tmp_path / "cluster", minilm_dir)
    sources = WeightSources(
        local,
        hf_fallback=False,
        cluster_cache=str(tmp_path / "cluster"),
        disk_pressure_threshold_percent=1e-9,  # every real filesystem is above it
        in_use=lambda: {"org/loaded"},
    )
    sources.resolve(CLUSTER_ID, None)
    assert sorted(p.name for p in local.iterdir()) == ["models--org--loaded", "models--test--minilm-cluster"]


def test_weights_path_is_relative_to_the_yaml(tmp_path):
    (tmp_path / "weights").mkdir()
    sources = WeightSources(local_cache=tmp_path, hf_fallback=False)
    assert sources.resolve(None, "weights", config_dir=tmp_path) == tmp_path / "weights"


def test_miss_lists_every_tier_tried(tmp_path):
    sources = WeightSources(local_cache=tmp_path, hf_fallback=False)
    with pytest.raises(WeightsNotFound) as info:
        sources.resolve("nobody/nothing", "missing", config_dir=Path("/nonexistent"))
    assert str(info.value) == (
        "no weights for 'nobody/nothing'; tried: weights_path /nonexistent/missing (absent); "
        "packages (none ships this model); "
        f"local cache {tmp_path / 'models--nobody--nothing' / 'snapshots'} (no snapshot); "
        "cluster cache (not configured: SIE_CLUSTER_CACHE is unset); "
        "hub download of 'nobody/nothing' (disabled: hf_fallback is off)"
    )


def test_miss_names_the_package_to_install(tmp_path, monkeypatch):
    missing = PackagedWeights("sie_no_such_package", "model", "sie-no-such-package==1.0", no_deps=True)
    monkeypatch.setitem(PACKAGED, "nobody/packaged", missing)
    with pytest.raises(WeightsNotFound) as info:
        WeightSources(local_cache=tmp_path, hf_fallback=False).resolve("nobody/packaged", None)
    assert "package 'sie_no_such_package' (not installed: sie-server install-weights nobody/packaged)" in str(
        info.value
    )


def test_offline_hub_miss_says_why(tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(WeightsNotFound) as info:
        WeightSources(local_cache=tmp_path, hf_fallback=True).resolve("nobody/nothing", None)
    message = str(info.value)
    assert "local cache" in message and "packages (none ships this model)" in message
    assert message.endswith("hub download of 'nobody/nothing' (offline: HF_HUB_OFFLINE is set)")


def test_unreachable_hub_is_unavailable_not_missing(tmp_path, monkeypatch):
    """A Hub endpoint where nothing listens (the real client, a closed loopback port)."""
    constants = pytest.importorskip("huggingface_hub.constants")
    from tests.s3 import free_port

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(WeightsUnavailable) as info:
        WeightSources(local_cache=tmp_path, hf_fallback=True).resolve("nobody/nothing", None)
    message = str(info.value)
    assert (
        "cluster cache (not configured: SIE_CLUSTER_CACHE is unset); hub download of 'nobody/nothing' (unreachable: "
        in message
    )
    assert not (tmp_path / "models--nobody--nothing").exists()
