"""What a caller actually set: a body holds the fields given, never ``null`` for one left out, so the
server's default applies (the public SDK sends its bodies the same way)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def given(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` without the ones that are None."""
    return {key: value for key, value in fields.items() if value is not None}
