"""A local weight cache on a full disk (a real tmpfs, ``chaos.disk``): the least recently used models go
first; a fetch that still does not fit is refused before a byte is written (``DiskFull``, naming the
disk and the room), one that runs out of room half way (a file cap: bytes to spare, the kernel's own
ENOSPC) leaves nothing a later load would trust, from the cluster cache and from the Hub (its stand-in,
serving real bytes) alike; with room made, the same fetch succeeds. The failure is the load class
``STORAGE``, never permanent, and names where to look for the room. Root only (mount): skipped
otherwise."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from chaos.disk import SmallDisk, full_disk
from sie.engine.load_errors import MAX_TRANSIENT_ATTEMPTS, LoadErrorClass, classify, room_of
from sie.engine.loader import can_retry, failure_after
from sie.weights.disk_cache import MARKER, DiskCache, folder_name
from sie.weights.errors import DiskFull
from sie.weights.sources import WeightSources
from tests.hub import running_hub

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")

KIB = 1024
MIB = 1024 * KIB
MODEL = "test/small-model"
REVISION = "abc123"
FILES = {  # what a model's snapshot holds: every one of them an adapter reads
    "config.json": b'{"hidden_size": 8}',
    "tokenizer.json": b'{"version": "1.0"}' * 100,
    "model.safetensors": bytes(range(256)) * 800,  # 200 KiB
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
}
NEEDED = sum(len(data) for data in FILES.values())


def cached(root: Path, hf_id: str, size: int, used_s_ago: float) -> None:
    folder = root / folder_name(hf_id)
    (folder / "snapshots" / "rev").mkdir(parents=True)
    (folder / "snapshots" / "rev" / "model.safetensors").write_bytes(b"x" * size)
    (folder / MARKER).touch()
    stamp = time.time() - used_s_ago
    os.utime(folder / MARKER, (stamp, stamp))


def cluster_cache(root: Path) -> Path:
    snapshot = root / folder_name(MODEL) / "snapshots" / REVISION
    for name, data in FILES.items():
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).write_bytes(data)
    return root


def inodes_used(folder: Path) -> int:
    stat = os.statvfs(folder)
    return stat.f_files - stat.f_ffree


def everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def assert_complete(snapshot: Path) -> None:
    assert {str(p.relative_to(snapshot)): p.read_bytes() for p in snapshot.rglob("*") if p.is_file()} == FILES


def test_the_least_recently_used_go_first_and_a_fetch_that_still_does_not_fit_is_refused(
    tmp_path: Path,
) -> None:
    with full_disk(tmp_path / "cache", 1 * MIB) as disk:
        cached(disk.folder, "org/old", 600 * KIB, used_s_ago=100)
        # The threshold out of the way (100 %): only the room the fetch needs decides.
        cache = DiskCache(disk.folder, threshold_percent=100.0)
        assert cache.require_room("org/new", 700 * KIB) == ["org/old"]
        cached(disk.folder, "org/loaded", 600 * KIB, used_s_ago=100)
        loaded = DiskCache(disk.folder, threshold_percent=100.0, in_use=lambda: {"org/loaded"})
        free = disk.free_bytes()
        with pytest.raises(DiskFull) as full:
            loaded.require_room("org/new", 700 * KIB)
        assert str(full.value) == (
            f"no room for org/new in the local weight cache {disk.folder}: it needs 0.7 MB, the disk "
            f"mounted at {disk.folder} has {free / 1e6:.1f} MB free of 1.0 MB (no cached model could "
            "be evicted)"
        )
        assert (full.value.root, full.value.needed_bytes) == (disk.folder, 700 * KIB)
        assert (disk.folder / folder_name("org/loaded")).is_dir()  # in use: never evicted


def fill_inodes(disk: SmallDisk, room_files: int) -> None:
    """Cap the disk's files at what it holds now plus ``room_files``: the bytes stay plenty."""
    disk.resize(4 * MIB, inodes=inodes_used(disk.folder) + room_files)


def test_a_cluster_copy_that_runs_out_of_room_half_way_leaves_nothing_then_succeeds_with_room(
    tmp_path: Path,
) -> None:
    cluster = cluster_cache(tmp_path / "cluster")
    with full_disk(tmp_path / "cache", 4 * MIB) as disk:
        sources = WeightSources(disk.folder, hf_fallback=False, cluster_cache=str(cluster))
        before = disk.free_bytes()
        # Room for the model's folders and two files: the third file's creation is ENOSPC.
        fill_inodes(disk, room_files=3 + 2 + 1)  # models--x, snapshots, the partial folder; 1_Pooling
        with pytest.raises(DiskFull) as full:
            sources.resolve(MODEL, None)
        assert str(full.value).startswith(
            f"the copy of {MODEL} ran out of room in the local weight cache {disk.folder}: it needs "
            f"{NEEDED / 1e6:.1f} MB, the disk mounted at {disk.folder} has"
        )
        assert str(full.value).endswith("(the partial copy was removed)")
        # Nothing a later load would take for a snapshot, and the space is back.
        assert sources.cached(MODEL) is None
        assert everything_under(disk.folder) == [folder_name(MODEL), f"{folder_name(MODEL)}/snapshots"]
        assert disk.free_bytes() == before
        # What the engine makes of it: the class and where to look for the room.
        assert classify(full.value, 1).error_class is LoadErrorClass.STORAGE
        assert room_of(full.value) == (disk.folder, NEEDED)

        disk.resize(4 * MIB, inodes=1000)
        assert_complete(sources.resolve(MODEL, None))


def test_a_copy_that_cannot_fit_is_refused_before_a_byte_is_written(tmp_path: Path) -> None:
    cluster = cluster_cache(tmp_path / "cluster")
    with full_disk(tmp_path / "cache", 128 * KIB) as disk:
        sources = WeightSources(disk.folder, hf_fallback=False, cluster_cache=str(cluster))
        with pytest.raises(DiskFull, match=rf"^no room for {MODEL} in the local weight cache "):
            sources.resolve(MODEL, None)
        assert everything_under(disk.folder) == []  # not even a folder
        disk.resize(1 * MIB)
        assert_complete(sources.resolve(MODEL, None))


def test_a_hub_download_that_runs_out_of_room_half_way_leaves_nothing_then_succeeds_with_room(
    tmp_path: Path,
) -> None:
    with (
        pytest.MonkeyPatch.context() as patch,
        running_hub(patch) as hub,
        full_disk(tmp_path / "c", 4 * MIB) as disk,
    ):
        hub.serve(MODEL, FILES)
        sources = WeightSources(disk.folder, hf_fallback=True)
        # How many files and folders a whole download makes (on a disk of its own), less two.
        with full_disk(tmp_path / "probe", 4 * MIB) as probe:
            WeightSources(probe.folder, hf_fallback=True).resolve(MODEL, None)
            whole = inodes_used(probe.folder)
        before = disk.free_bytes()
        disk.resize(4 * MIB, inodes=whole - 2)
        with pytest.raises(DiskFull) as full:
            sources.resolve(MODEL, None)
        assert str(full.value).startswith(
            f"the download of {MODEL} ran out of room in the local weight cache"
        )
        assert str(full.value).endswith("(the partial download was removed)")
        assert sources.cached(MODEL) is None
        assert everything_under(disk.folder) == []  # the staging folder went with what it held
        assert disk.free_bytes() == before

        disk.resize(4 * MIB, inodes=1000)
        snapshot = sources.resolve(MODEL, None)
        assert snapshot == disk.folder / folder_name(MODEL) / "snapshots" / ("0" * 40)
        assert_complete(snapshot)
        assert all(p.is_symlink() for p in snapshot.rglob("*") if p.is_file())  # into the model's blobs
        assert sorted(p.name for p in disk.folder.iterdir()) == [folder_name(MODEL)]
        assert shutil.disk_usage(disk.folder).free < before  # the blobs are on this disk


def test_a_full_disk_is_never_permanent_and_may_be_retried_as_soon_as_the_room_is_there(
    tmp_path: Path,
) -> None:
    with full_disk(tmp_path / "cache", 256 * KIB) as disk:
        needed = 512 * KIB
        full = DiskCache(disk.folder).full("no room for org/x", needed, "no cached model could be evicted")
        failure = None
        for _ in range(MAX_TRANSIENT_ATTEMPTS + 1):
            failure = failure_after("org/x", full, failure)
        assert failure is not None and failure.attempts == MAX_TRANSIENT_ATTEMPTS + 1
        assert (failure.error_class, failure.permanent) == (LoadErrorClass.STORAGE, False)
        assert failure.room == (disk.folder, needed)
        assert not can_retry(failure)  # in its cooldown, and the disk still too small
        disk.resize(1 * MIB)
        assert can_retry(failure)  # the room is there: no need to wait out the cooldown
