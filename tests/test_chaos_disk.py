"""``chaos.disk``: a real tmpfs over a real folder. Writing past its size or its file cap is the
kernel's ENOSPC; ``resize`` makes room in place; on exit the folder shows what it held before, and
``sweep`` unmounts what a killed owner left. Root only (mount(2)): skipped otherwise."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chaos import disk

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")

KIB = 1024


def test_a_write_past_the_size_is_enospc_and_a_resize_makes_room_keeping_what_is_there(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "before.txt").write_text("under the mount")
    with disk.full_disk(folder, 64 * KIB) as small:
        assert not (folder / "before.txt").exists()  # hidden while mounted
        assert small.free_bytes() == 64 * KIB
        (folder / "kept").write_bytes(b"k" * 16 * KIB)
        with pytest.raises(OSError) as full:
            (folder / "big").write_bytes(b"x" * 100 * KIB)
        assert full.value.errno == errno.ENOSPC
        small.resize(256 * KIB)
        (folder / "big").write_bytes(b"x" * 100 * KIB)
        assert (folder / "kept").read_bytes() == b"k" * 16 * KIB
        assert small.free_bytes() == (256 - 16 - 100) * KIB
    assert (folder / "before.txt").read_text() == "under the mount"
    assert not (folder / "kept").exists()
    assert (small.source, small.folder) not in disk._mounts()


def test_an_inode_cap_fails_a_file_with_bytes_to_spare(tmp_path: Path) -> None:
    with disk.full_disk(tmp_path / "cache", 1024 * KIB, inodes=3) as small:  # the root and two files
        (small.folder / "a").write_bytes(b"a")
        (small.folder / "b").write_bytes(b"b")
        with pytest.raises(OSError) as full:
            (small.folder / "c").write_bytes(b"c")
        assert full.value.errno == errno.ENOSPC and small.free_bytes() > 1000 * KIB


def test_bad_sizes_are_refused_before_anything_is_mounted(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="under one page"), disk.full_disk(tmp_path / "cache", 100):
        pass
    with (
        pytest.raises(ValueError, match="at least one file"),
        disk.full_disk(tmp_path / "cache", KIB * 64, 0),
    ):
        pass
    assert not (tmp_path / "cache").exists()


def test_sweep_unmounts_a_killed_owners_disk_and_nothing_else(tmp_path: Path) -> None:
    owner = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from chaos.disk import full_disk
        with full_disk(Path({str(tmp_path / "orphan")!r}), 65536) as small:
            print(small.source, flush=True)
            time.sleep(600)
        """
    )
    root = Path(__file__).resolve().parents[1]
    child = subprocess.Popen(
        [sys.executable, "-c", owner],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        assert child.stdout is not None
        source = child.stdout.readline().strip()
        with disk.full_disk(tmp_path / "mine", 64 * KIB) as mine:
            swept = disk.sweep()  # another run's leftovers may go too, never a live owner's
            assert (tmp_path / "orphan").resolve() not in swept and mine.folder not in swept
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
            assert (tmp_path / "orphan").resolve() in disk.sweep()
            mounted = disk._mounts()
            assert (mine.source, mine.folder) in mounted
            assert not any(name == source for name, _ in mounted)
    finally:
        child.kill()
        child.wait(timeout=10)
        disk.sweep()
