"""The running server is on the malloc ``SIE_ALLOCATOR=auto`` picks: mapped into its process, named in its log."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sie.core import allocator
from tests.e2e.conftest import Server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD re-exec is Linux's")


def test_the_shared_server_runs_on_the_preferred_installed_allocator(server: Server) -> None:
    expected = next((path for known in allocator.PREFERENCE if (path := allocator.find(known))), None)
    maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    if expected is None:
        assert "malloc: the system's" in server.log()
        return
    assert Path(expected).name in maps
    assert f"malloc: {expected}" in server.log()
    assert server.encode(["still serving"])[0].shape == (384,)
