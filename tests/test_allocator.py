"""The allocator decision (sie.core.allocator.plan): when the server re-executes on which malloc, and when not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sie.core import allocator
from sie.core.allocator import Allocator

TC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
JE = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def installed(*names: str) -> Callable[[Allocator], str | None]:
    paths = {"tcmalloc": TC, "jemalloc": JE}
    return lambda known: paths[known.name] if known.name in names else None


def test_auto_prefers_tcmalloc_with_its_defaults() -> None:
    decided = allocator.plan({}, installed("tcmalloc", "jemalloc"))
    assert decided.library == TC
    assert decided.env["LD_PRELOAD"] == TC
    assert decided.env[allocator.APPLIED_ENV] == TC
    assert decided.env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"] == str(1 << 40)
    assert "MALLOC_CONF" not in decided.env


def test_auto_falls_back_to_jemalloc_with_its_decay_config() -> None:
    decided = allocator.plan({}, installed("jemalloc"))
    assert decided.library == JE
    assert decided.env["MALLOC_CONF"] == allocator.JEMALLOC.env["MALLOC_CONF"]


def test_auto_with_neither_keeps_the_system_malloc() -> None:
    assert allocator.plan({"SIE_ALLOCATOR": "auto"}, installed()).library is None


def test_system_switches_it_off() -> None:
    assert allocator.plan({"SIE_ALLOCATOR": "system"}, installed("tcmalloc")).library is None


@pytest.mark.parametrize(
    ("choice", "package"), [("jemalloc", "libjemalloc2"), ("tcmalloc", "libtcmalloc-minimal4")]
)
def test_an_explicit_allocator_that_is_missing_is_an_error(choice: str, package: str) -> None:
    with pytest.raises(allocator.AllocatorError, match=package):
        allocator.plan({"SIE_ALLOCATOR": choice}, installed())


def test_an_explicit_allocator_is_taken_over_auto_preference() -> None:
    assert allocator.plan({"SIE_ALLOCATOR": "jemalloc"}, installed("tcmalloc", "jemalloc")).library == JE


def test_the_reexecuted_process_does_not_loop() -> None:
    assert allocator.plan({allocator.APPLIED_ENV: TC}, installed("tcmalloc")).library is None


def test_already_preloaded_is_left_alone() -> None:
    env = {"LD_PRELOAD": "/opt/lib/libtcmalloc_minimal.so.4"}
    assert allocator.plan(env, installed("tcmalloc")).library is None


def test_other_preloads_are_kept_and_the_users_settings_win() -> None:
    env = {"LD_PRELOAD": "/opt/libfoo.so", "MALLOC_CONF": "narenas:2"}
    decided = allocator.plan(env, installed("jemalloc"))
    assert decided.env["LD_PRELOAD"] == f"{JE} /opt/libfoo.so"
    assert "MALLOC_CONF" not in decided.env
    env = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": "1000"}
    assert "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD" not in allocator.plan(env, installed("tcmalloc")).env


def test_a_path_names_any_library_and_gets_its_defaults_when_known(tmp_path: Path) -> None:
    lib = tmp_path / "libtcmalloc_minimal.so.4.5.10"
    lib.write_bytes(b"")
    decided = allocator.plan({"SIE_ALLOCATOR": str(lib)}, installed())
    assert decided.library == str(lib)
    assert "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD" in decided.env
    other = tmp_path / "libmimalloc.so"
    other.write_bytes(b"")
    assert set(allocator.plan({"SIE_ALLOCATOR": str(other)}, installed()).env) == {
        "LD_PRELOAD",
        allocator.APPLIED_ENV,
    }
    with pytest.raises(allocator.AllocatorError, match="no such file"):
        allocator.plan({"SIE_ALLOCATOR": str(tmp_path / "absent.so")}, installed())


@pytest.mark.parametrize("known", allocator.PREFERENCE, ids=lambda known: known.name)
def test_find_takes_the_library_from_its_folders_else_none(known: Allocator, tmp_path: Path) -> None:
    """ctypes' own search answers a bare soname on Linux, never a path, so an empty folder finds none."""
    assert allocator.find(known, dirs=(str(tmp_path),)) is None
    for name in known.files:
        (tmp_path / name).write_bytes(b"")
    assert allocator.find(known, dirs=(str(tmp_path),)) == str(tmp_path / known.files[0])
