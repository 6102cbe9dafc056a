"""Load failures are classified by their cause chain; the class decides permanence and cooldown."""

from __future__ import annotations

import errno
import json

import pytest
import torch
from safetensors import SafetensorError

from sie.adapters.loading import UnknownAdapter
from sie.engine.load_errors import MAX_COOLDOWN_S, MAX_TRANSIENT_ATTEMPTS, LoadErrorClass, classify
from sie.weights.sources import WeightsNotFound


def caused(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as chained:
        return chained


@pytest.mark.parametrize(
    ("exc", "expected", "permanent"),
    [
        (WeightsNotFound("no weights for 'x'"), LoadErrorClass.NOT_FOUND, True),
        (ModuleNotFoundError("No module named 'gliner'"), LoadErrorClass.DEPENDENCY, True),
        (UnknownAdapter("cannot import adapter"), LoadErrorClass.CONFIG, True),
        (ValueError("ColBERT projection is (8, 4), expected (16, 128)"), LoadErrorClass.CONFIG, True),
        (
            SafetensorError("Error while deserializing header: incomplete metadata"),
            LoadErrorClass.CORRUPT,
            True,
        ),
        (json.JSONDecodeError("Expecting value", "{", 0), LoadErrorClass.CORRUPT, True),
        (MemoryError(), LoadErrorClass.OOM, False),
        (torch.OutOfMemoryError("CUDA out of memory"), LoadErrorClass.OOM, False),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory"), LoadErrorClass.OOM, False),
        (ConnectionResetError("reset by peer"), LoadErrorClass.NETWORK, False),
        (OSError(errno.ENOSPC, "No space left on device"), LoadErrorClass.STORAGE, False),
        (RuntimeError("something odd"), LoadErrorClass.UNKNOWN, False),
    ],
)
def test_each_cause_gets_its_class(exc: Exception, expected: LoadErrorClass, permanent: bool) -> None:
    failure = classify(exc, attempts=1)
    assert (failure.error_class, failure.permanent) == (expected, permanent)
    assert (failure.cooldown_s == 0) is permanent


def test_the_cause_chain_is_read_first_link_that_explains_wins() -> None:
    wrapped = caused(RuntimeError("load failed"), ConnectionError("timed out talking to s3"))
    assert classify(wrapped, 1).error_class is LoadErrorClass.NETWORK


def test_transient_cooldowns_double_and_then_the_failure_becomes_permanent() -> None:
    cooldowns = [classify(ConnectionError("x"), attempts).cooldown_s for attempts in (1, 2, 3)]
    assert cooldowns == [30.0, 60.0, 120.0]
    assert classify(ConnectionError("x"), 7).cooldown_s == MAX_COOLDOWN_S
    last = classify(ConnectionError("x"), MAX_TRANSIENT_ATTEMPTS)
    assert last.permanent and last.error_class is LoadErrorClass.NETWORK
