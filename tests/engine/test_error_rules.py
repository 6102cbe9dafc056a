"""The one error table: every engine error has a rule, and its queue column agrees with its HTTP one."""

from __future__ import annotations

import inspect

import pytest

from sie.engine import errors
from sie.engine.error_rules import ERROR_TABLE, UNEXPECTED, QueueAction, rule_for
from sie.server.errors import HTTP, http_of
from sie.wire.errors import ErrorCode

ENGINE_ERRORS = [
    cls for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, errors.EngineError)
]


@pytest.mark.parametrize(
    "cls", [c for c in ENGINE_ERRORS if c is not errors.EngineError], ids=lambda c: c.__name__
)
def test_every_engine_error_has_its_own_rule(cls: type[Exception]) -> None:
    assert cls in ERROR_TABLE


def test_retry_rules_say_when_and_the_others_do_not() -> None:
    for rule in [*ERROR_TABLE.values(), UNEXPECTED]:
        assert (rule.queue is QueueAction.RETRY) == (rule.retry_after_s is not None), rule


def test_a_queue_answers_exactly_the_client_errors() -> None:
    """4xx: the request is wrong, so a queue answers it; 5xx: retried when transient, else given up."""
    for rule in [*ERROR_TABLE.values(), UNEXPECTED]:
        status = http_of(rule).status
        assert (rule.queue is QueueAction.ANSWER) == (status < 500), rule
        if rule.queue is QueueAction.RETRY:
            assert status == 503, rule


def test_every_wire_code_renders_over_http() -> None:
    assert set(HTTP) == set(ErrorCode)


def test_the_nearest_class_decides() -> None:
    class Narrower(errors.ModelLoading):
        pass

    assert rule_for(Narrower("m")) is ERROR_TABLE[errors.ModelLoading]
    assert rule_for(ValueError("x")) is None
