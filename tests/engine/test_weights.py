from pathlib import Path

import pytest

from sie.engine.weights import WeightsNotFound, WeightSources


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
    assert "weights_path" in message and "local cache" in message and "hub download (disabled)" in message
