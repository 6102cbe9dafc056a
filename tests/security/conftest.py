"""What the hostile-input modules share: one real ``nats-server`` per module (its own store, on a free
loopback port), unsecured; ``test_sec_nats`` starts its secured one itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import NatsServer, running_nats


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    with running_nats(tmp_path_factory.mktemp("nats")) as server:
        yield server
