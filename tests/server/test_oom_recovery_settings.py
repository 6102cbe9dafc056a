"""``SIE_OOM_RECOVERY__*`` and ``SIE_DISABLE_OOM_RECOVERY`` read as the public server reads them (nested
by ``__``, the strategy a JSON list or comma-separated, bounds refused) into the engine's plan."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sie.engine.oom import OomAction, OomRecovery
from sie.settings.server import Settings


def test_the_defaults_are_the_public_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().oom_plan() == OomRecovery(
        True, (OomAction.CACHE_CLEAR, OomAction.EVICT_LRU, OomAction.SPLIT_BATCH), 4, 5.0, 5
    )


@pytest.mark.parametrize(
    "strategy", ['["split_batch", "cache_clear", "split_batch"]', "split_batch, cache_clear"]
)
def test_nested_variables_set_the_plan(monkeypatch: pytest.MonkeyPatch, strategy: str) -> None:
    monkeypatch.setenv("SIE_OOM_RECOVERY__STRATEGY", strategy)
    monkeypatch.setenv("SIE_OOM_RECOVERY__MAX_SPLIT_DEPTH", "2")
    monkeypatch.setenv("SIE_OOM_RECOVERY__EVICTION_LOCK_TIMEOUT_S", "0.5")
    monkeypatch.setenv("SIE_OOM_RECOVERY__RETRY_AFTER_S", "9")
    plan = Settings().oom_plan()
    assert plan == OomRecovery(True, (OomAction.SPLIT_BATCH, OomAction.CACHE_CLEAR), 2, 0.5, 9)


def test_either_switch_turns_recovery_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIE_OOM_RECOVERY__ENABLED", "false")
    assert Settings().oom_plan().steps() == ()
    monkeypatch.setenv("SIE_OOM_RECOVERY__ENABLED", "true")
    monkeypatch.setenv("SIE_DISABLE_OOM_RECOVERY", "1")  # the kill switch wins, as in the public server
    assert Settings().oom_plan().steps() == ()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SIE_OOM_RECOVERY__STRATEGY", "shrink_batch"),
        ("SIE_OOM_RECOVERY__STRATEGY", "[]"),
        ("SIE_OOM_RECOVERY__MAX_SPLIT_DEPTH", "9"),
        ("SIE_OOM_RECOVERY__RETRY_AFTER_S", "0"),
    ],
)
def test_values_outside_the_public_bounds_refuse_the_start(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match="oom_recovery"):
        Settings()
