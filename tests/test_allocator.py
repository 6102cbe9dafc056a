"""The allocator decision (sie.core.allocator.plan): when the server re-executes on jemalloc, and when not."""

from __future__ import annotations

from pathlib import Path

import pytest

from sie.core import allocator

JE = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def found() -> str | None:
    return JE


def missing() -> str | None:
    return None


def test_auto_preloads_jemalloc_with_decay_config() -> None:
    decided = allocator.plan({}, found)
    assert decided.library == JE
    assert decided.env["LD_PRELOAD"] == JE
    assert decided.env[allocator.APPLIED_ENV] == JE
    assert decided.env["MALLOC_CONF"] == allocator.JEMALLOC_CONF


def test_auto_without_jemalloc_keeps_the_system_malloc() -> None:
    assert allocator.plan({"SIE_ALLOCATOR": "auto"}, missing).library is None


def test_system_switches_it_off() -> None:
    assert allocator.plan({"SIE_ALLOCATOR": "system"}, found).library is None


def test_explicit_jemalloc_missing_is_an_error() -> None:
    with pytest.raises(allocator.AllocatorError, match="libjemalloc2"):
        allocator.plan({"SIE_ALLOCATOR": "jemalloc"}, missing)


def test_the_reexecuted_process_does_not_loop() -> None:
    assert allocator.plan({allocator.APPLIED_ENV: JE}, found).library is None


def test_already_preloaded_is_left_alone() -> None:
    assert allocator.plan({"LD_PRELOAD": "/opt/lib/libjemalloc.so.2"}, found).library is None


def test_other_preloads_are_kept_and_users_malloc_conf_wins() -> None:
    decided = allocator.plan({"LD_PRELOAD": "/opt/libfoo.so", "MALLOC_CONF": "narenas:2"}, found)
    assert decided.env["LD_PRELOAD"] == f"{JE} /opt/libfoo.so"
    assert "MALLOC_CONF" not in decided.env


def test_a_path_names_any_library(tmp_path: Path) -> None:
    lib = tmp_path / "libtcmalloc.so.4"
    lib.write_bytes(b"")
    decided = allocator.plan({"SIE_ALLOCATOR": str(lib)}, missing)
    assert decided.library == str(lib)
    assert "MALLOC_CONF" not in decided.env
    with pytest.raises(allocator.AllocatorError, match="no such file"):
        allocator.plan({"SIE_ALLOCATOR": str(tmp_path / "absent.so")}, found)


def test_find_jemalloc_returns_an_existing_file_or_none() -> None:
    library = allocator.find_jemalloc()
    assert library is None or Path(library).is_file()
