"""The environment under test is exactly ``requirements/lock.txt``, and the lock honours pyproject.toml.

CI tests what ``scripts/setup`` installs; if the venv drifts from the lock (a package added by hand, an
upgrade, a stale venv after the lock moved), what passed here is not what a new machine gets, so the
suite says so instead of passing on a set nobody else has.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import REPO

LOCK = REPO / "requirements" / "lock.txt"
# Packages scripts/setup leaves out where the system cannot build them: name -> the file they need.
BUILT_AGAINST = {"netfilterqueue": Path("/usr/include/libnetfilter_queue/libnetfilter_queue.h")}
PROJECT = "sie-engine"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def locked() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        match = PIN.match(line)
        if match:
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def installed() -> dict[str, str]:
    found = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    found.pop(canonicalize_name(PROJECT), None)
    return found


def test_the_lock_pins_every_package_once_with_hashes():
    text = LOCK.read_text()
    names = [canonicalize_name(m[1]) for m in map(PIN.match, text.splitlines()) if m]
    assert len(names) == len(set(names)) > 100
    # One hash line at least per pinned package: `uv pip sync` refuses a changed file.
    assert text.count("--hash=sha256:") >= len(names)
    assert "torch" in names and "arcjet" not in names  # the override leaves the arcjet SDK out


def test_installed_packages_are_exactly_the_lock():
    want, have = locked(), installed()
    missing = sorted(
        name for name in set(want) - set(have) if name not in BUILT_AGAINST or BUILT_AGAINST[name].exists()
    )
    extra = sorted(set(have) - set(want))
    other = sorted(
        f"{name} {have[name]} (lock {want[name]})"
        for name in set(want) & set(have)
        if have[name] != want[name]
    )
    assert (missing, extra, other) == ([], [], []), (
        "the venv differs from requirements/lock.txt: run scripts/setup "
        f"(missing {missing}, not in the lock {extra}, other versions {other})"
    )


def test_the_lock_satisfies_every_declared_range():
    """A range edited in pyproject.toml without `scripts/lock` fails here, not on a user's machine."""
    pins = locked()
    environment = {str(k): str(v) for k, v in default_environment().items()}
    declared = [Requirement(r) for r in metadata.requires(PROJECT) or []]
    unmet = []
    for requirement in declared:
        if requirement.marker is not None and not any(
            requirement.marker.evaluate({**environment, "extra": extra}) for extra in ("", "server", "dev")
        ):
            continue
        name = canonicalize_name(requirement.name)
        if name == canonicalize_name(PROJECT):
            continue
        if name not in pins or not requirement.specifier.contains(Version(pins[name]), prereleases=True):
            unmet.append(f"{requirement} (lock: {pins.get(name, 'absent')})")
    assert unmet == []
