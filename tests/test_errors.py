"""The one error table: every error class of every process names a code the table has, one code has one
rule (so one ``Retry-After``) whichever process raises it, and the queue column agrees with HTTP."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from sie.catalog import config_errors
from sie.catalog import errors as catalog_errors
from sie.engine import errors as engine_errors
from sie.errors import RULES, UNEXPECTED, QueueAction, Relayed, SieError, rule_for, told
from sie.gateway import errors as gateway_errors
from sie.http import errors as http_errors
from sie.http.errors import HTTP, http_of
from sie.queue import codec, payloads
from sie.wire.codec import WireDecodeError
from sie.wire.errors import ConfigErrorCode, ErrorCode

MODULES: list[ModuleType] = [
    catalog_errors,
    config_errors,
    engine_errors,
    gateway_errors,
    http_errors,
    codec,
    payloads,
]


def _declared(module: ModuleType) -> list[type[SieError]]:
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, SieError) and cls.__module__ == module.__name__ and cls is not SieError
    ]


@pytest.mark.parametrize(
    "cls", [c for m in MODULES for c in _declared(m)], ids=lambda c: f"{c.__module__}.{c.__name__}"
)
def test_every_error_class_names_a_code_of_the_table(cls: type[SieError]) -> None:
    assert cls.code in RULES


def test_every_code_has_one_rule_and_every_rule_renders_over_http() -> None:
    assert set(RULES) == set(ErrorCode) | set(ConfigErrorCode)
    assert all(rule.code == code for code, rule in RULES.items())
    assert set(HTTP) == set(RULES)


def test_retry_rules_say_when_and_the_others_do_not() -> None:
    for rule in RULES.values():
        assert (rule.queue is QueueAction.RETRY) == (rule.retry_after_s is not None), rule


def test_a_queue_answers_exactly_the_client_errors() -> None:
    """4xx: the request is wrong, so a queue answers it; 5xx: retried when transient, else given up."""
    for rule in RULES.values():
        status = http_of(rule).status
        assert (rule.queue is QueueAction.ANSWER) == (status < 500), rule
        if rule.queue is QueueAction.RETRY:
            assert status == 503, rule


def test_the_gateways_queue_refusals_wait_as_long_as_the_engines() -> None:
    """QUEUE_FULL answered by a worker's engine or by the gateway's publish: one wait."""
    overloaded = rule_for(engine_errors.Overloaded("full"))
    published = rule_for(gateway_errors.PublishFailed("stream full"))
    unreachable = rule_for(gateway_errors.QueueUnreachable("no NATS"))
    assert overloaded is published is unreachable is RULES[ErrorCode.QUEUE_FULL]
    assert rule_for(gateway_errors.NoAnswer("m", 30)) is rule_for(engine_errors.ModelLoading("m"))


def test_the_nearest_class_decides() -> None:
    class Narrower(engine_errors.ModelLoading):
        pass

    assert rule_for(Narrower("m")) is RULES[ErrorCode.MODEL_LOADING]
    assert rule_for(WireDecodeError("bad body")) is RULES[ErrorCode.INVALID_INPUT]
    assert rule_for(gateway_errors.ItemTooLarge(3)) is RULES[ErrorCode.PAYLOAD_TOO_LARGE]
    assert rule_for(ValueError("x")) is None


def test_a_relayed_error_keeps_its_peers_code_and_an_unknown_one_is_internal() -> None:
    assert rule_for(Relayed("LORA_LOADING", "loading")) is RULES[ErrorCode.LORA_LOADING]
    assert rule_for(Relayed("SOMETHING_NEWER", "?")) is UNEXPECTED


def test_an_unexpected_errors_text_stays_in_the_log(caplog) -> None:
    rule, message = told(RuntimeError("secret detail"))
    assert (rule, message) == (UNEXPECTED, "Internal server error")
    assert [str(r.exc_info[1]) for r in caplog.records if r.exc_info] == ["secret detail"]
