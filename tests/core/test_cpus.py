"""Cores a process may use: the affinity mask and the cgroup quota."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sie.core.cpus import cgroup_cpus, usable_cpus


def _cgroup(tmp_path: Path, v2: str | None = None, v1: tuple[str, str] | None = None) -> Path:
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    return tmp_path


def test_a_cgroup_quota_caps_the_cores_rounded_up(tmp_path: Path) -> None:
    root = _cgroup(tmp_path, v2="50000 100000")
    assert cgroup_cpus(root) == 0.5
    assert usable_cpus(root) == 1  # half a core still runs one thread


def test_a_cgroup_without_a_quota_leaves_the_affinity_mask(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    assert usable_cpus(_cgroup(tmp_path, v2="max 100000")) == affinity
    (tmp_path / "v1").mkdir()
    assert usable_cpus(_cgroup(tmp_path / "v1", v1=("-1", "100000"))) == affinity
    assert usable_cpus(tmp_path / "missing") == affinity


def test_a_cgroup_v1_quota_is_read_when_there_is_no_v2_file(tmp_path: Path) -> None:
    root = _cgroup(tmp_path, v1=("100000", "100000"))
    assert cgroup_cpus(root) == 1.0
    assert usable_cpus(root) == 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin to one")
def test_a_server_pinned_to_one_core_runs_its_forward_on_one_thread() -> None:
    """The settings a ``sie-server`` under ``taskset -c 0`` builds its engine from, in a real pinned
    process: one intra-op thread although the machine has more cores."""
    code = "from sie.settings.server import Settings; print(Settings().threads())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
    out = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "1"
