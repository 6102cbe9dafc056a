"""How a family reads the values a request or a profile gives it: numbers checked against their
bounds, with the family's words in the refusal (``UnsupportedInput`` becomes a 400; a profile's
``loadtime`` error fails the load)."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from sie.core.task import Task, UnsupportedInput


def unit_option(task: Task | None, name: str, default: float, family: str) -> float:
    """A score threshold from the request: a finite number in [0, 1], not a bool; anything else (a
    string, an integer too large for a float) is the client's error, named with the family's words."""
    number = finite_number(task.option(name, default) if task else default)
    if not (math.isfinite(number) and 0 <= number <= 1):
        raise UnsupportedInput(f"{family} {name} must be a finite number between 0 and 1")
    return number


def integer_option(
    task: Task | None, name: str, default: int, family: str, low: int = 1, high: int | None = None
) -> int:
    """An integer option from the request or the profile, from ``low`` to ``high``; a bool, a float,
    a string or an integer outside the bounds is the client's error, named with the family's words."""
    value = task.option(name, default) if task else default
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        if high is not None:
            bounds = f"an integer from {low} to {high}"
        else:
            bounds = "a positive integer" if low == 1 else f"an integer of at least {low}"
        raise UnsupportedInput(f"{family} option '{name}' must be {bounds}, got {value!r}")
    return value


def loadtime_integer(loadtime: Mapping[str, Any], key: str, default: int) -> int:
    """A positive integer a profile's ``loadtime`` sets (``default`` when it sets none); anything else
    (a bool, a float, a string, zero) is the model's YAML's error, raised at load."""
    value = loadtime.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"loadtime {key} must be a positive integer, got {value!r}")
    return value


def eager_cuda_graphs(loadtime: Mapping[str, Any], family: str) -> str:
    """The public server's ``loadtime.cuda_graphs`` (``"off"`` or ``"bucketed"``; YAML reads an
    unquoted ``off`` as false), checked so its YAMLs load; the encoder runs eagerly here."""
    mode = loadtime.get("cuda_graphs", "off")
    mode = "off" if mode is False else mode
    if mode not in ("off", "bucketed"):
        raise ValueError(f"{family} cuda_graphs must be 'off' or 'bucketed', got {mode!r}")
    if mode != "off":
        logging.getLogger(__name__).info(
            "%s: cuda_graphs=%s is accepted; the encoder runs eagerly", family, mode
        )
    return str(mode)


def is_offset(value: Any) -> TypeGuard[int]:
    """Whether a client's character offset is an integer (a bool is not one, though Python says so)."""
    return isinstance(value, int) and not isinstance(value, bool)


def finite_number(value: Any) -> float:
    """A client's number as a float; NaN for anything else (a bool, a string, an integer too large for
    a float: 10**400 arrives as a JSON integer), which the caller refuses by ``math.isfinite``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):
            return float(value)
    return math.nan
