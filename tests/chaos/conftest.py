"""One multi-host topology for the chaos tests (chaos.topology: three NATS nodes at R3, sie-config,
two gateways and two workers, each in its own network namespace), with the standalone server's
answers to the load's requests computed once: each fault test puts the public SDK's steady load on
it, injects its fault, heals it and checks the invariant (chaos.report). Skipped, with the reason,
where network namespaces cannot be made (not root)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import hosts
from chaos.run import Harness
from chaos.topology import topology


@pytest.fixture(scope="package")
def harness(tmp_path_factory: pytest.TempPathFactory, public_python: Path) -> Iterator[Harness]:
    why = hosts.available()
    if why is not None:
        pytest.skip(why)
    with topology(tmp_path_factory.mktemp("chaos")) as top:
        run = Harness(top, public_python, concurrency=3)
        run.expect()
        yield run
