"""`pip install .` must give a working SDK without the server stack."""

import subprocess
import sys

HEAVY = (
    "torch",
    "transformers",
    "onnxruntime",
    "fastapi",
    "msgspec",
    "tokenizers",
    "sie.server",
    "sie.engine",
)


def test_sdk_import_pulls_no_server_dependencies():
    code = f"import sys, sie.sdk, sie.sdk.scoring, sie.sdk.encoding; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_base_dependencies_are_only_the_sdk_ones():
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    base = [Requirement(r) for r in requires("sie-engine") or [] if "extra ==" not in r]
    assert sorted(r.name for r in base) == ["httpx", "msgpack", "numpy"]


def test_every_declared_range_is_bounded_both_ways():
    """README, Dependencies: a lower bound the suite ran on, an upper one before the next series."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    unbounded = []
    for requirement in map(Requirement, requires("sie-engine") or []):
        if requirement.name == "sie-engine":  # the dev extra naming the server's
            continue
        operators = {spec.operator for spec in requirement.specifier}
        pinned = "==" in operators
        if not pinned and not ({">=", ">"} & operators and {"<", "<="} & operators):
            unbounded.append(str(requirement))
    assert unbounded == []
