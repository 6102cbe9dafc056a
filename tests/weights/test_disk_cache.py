"""Disk LRU over the local weight cache (``sie.weights.disk_cache``), on a real folder and filesystem.

The threshold is set to 0 % (every filesystem is "full") or 100 % (none is) so the real usage of the
test machine's disk does not decide the outcome."""

import os
import time
from pathlib import Path

from sie.weights.disk_cache import MARKER, DiskCache, folder_name


def cached(root: Path, hf_id: str, used_s_ago: float | None) -> Path:
    folder = root / folder_name(hf_id)
    (folder / "snapshots" / "rev").mkdir(parents=True)
    (folder / "snapshots" / "rev" / "model.safetensors").write_bytes(b"x" * 1000)
    if used_s_ago is not None:
        marker = folder / MARKER
        marker.touch()
        stamp = time.time() - used_s_ago
        os.utime(marker, (stamp, stamp))
    return folder


def test_evicts_least_recently_used_first_and_spares_the_model_in_use_and_the_one_being_fetched(tmp_path):
    cached(tmp_path, "org/old", 300)
    cached(tmp_path, "org/loaded", 400)  # oldest, but loaded now
    cached(tmp_path, "org/recent", 10)
    cached(tmp_path, "org/middle", 100)
    cached(tmp_path, "org/target", 500)
    (tmp_path / "datasets--org--data").mkdir()  # not a model: never touched
    cache = DiskCache(tmp_path, enabled=True, threshold_percent=0.0, in_use=lambda: {"org/loaded"})
    assert cache.make_room("org/target") == ["org/old", "org/middle", "org/recent"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "datasets--org--data",
        "models--org--loaded",
        "models--org--target",
    ]


def test_touch_moves_a_model_to_the_back_of_the_queue(tmp_path):
    cached(tmp_path, "org/a", 200)
    cached(tmp_path, "org/b", 100)
    cache = DiskCache(tmp_path, threshold_percent=0.0)
    cache.touch("org/a")
    assert cache.make_room("org/new") == ["org/b", "org/a"]


def test_a_folder_without_marker_counts_by_its_own_time(tmp_path):
    folder = cached(tmp_path, "org/foreign", None)
    stamp = time.time() - 1000
    os.utime(folder, (stamp, stamp))
    cached(tmp_path, "org/ours", 10)
    assert DiskCache(tmp_path, threshold_percent=0.0).make_room("org/new") == ["org/foreign", "org/ours"]


def test_nothing_goes_below_the_threshold_or_when_disabled(tmp_path):
    cached(tmp_path, "org/a", 100)
    assert DiskCache(tmp_path, threshold_percent=100.0).make_room("org/new") == []
    assert DiskCache(tmp_path, enabled=False, threshold_percent=0.0).make_room("org/new") == []
    assert (tmp_path / folder_name("org/a")).is_dir()


def test_too_little_free_space_for_the_download_evicts_too(tmp_path):
    cached(tmp_path, "org/a", 100)
    huge = 1 << 62  # more than any disk has free
    assert DiskCache(tmp_path, threshold_percent=100.0).make_room("org/new", huge) == ["org/a"]
