"""The request options declared beside the adapter names are the families' own."""

from __future__ import annotations

import pytest

from sie.adapters.registry import CANONICAL, adapter_class, declared_request_options


@pytest.mark.parametrize("path", sorted(CANONICAL))
def test_each_families_declared_options_are_its_classes(path: str) -> None:
    assert declared_request_options(path) == adapter_class(path).request_options


def test_a_custom_adapter_declares_nothing_here() -> None:
    assert declared_request_options("my_adapter.py:Mine") is None
