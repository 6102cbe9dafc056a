"""Metric children looked up once per label set.

``metric.labels(*values)`` checks and joins its values and takes the metric's lock on every call; a
request makes several such calls (its count, its phases, its batch), which on a lone request is a
measurable share of the server's own CPU. Every label set here is the operator's or the catalogue's
(models, endpoints, phases, profiles, status codes), never a caller's free text, so the memo stays as
small as the metric's own series.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from prometheus_client import Counter, Gauge, Histogram

M = TypeVar("M", Counter, Gauge, Histogram)


class LabelledChildren:
    """A registry's metrics' children, memoised; the series are never removed, so a child kept here
    is always the one the exposition reads."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def labelled(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)``, looked up once per label set."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return cast(M, child)
