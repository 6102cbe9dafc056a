"""The upstreams file as the public format reads it, and the limiter's three limits.

A file's refusals name the file and the field and never repeat the offending value (a URL with a
password, a key pasted where its variable's name belongs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sie.upstream.config import (
    Endpoint,
    UpstreamConfigError,
    UpstreamCredentialError,
    UpstreamKind,
    load_upstreams,
    remote_serving_from_env,
)
from sie.upstream.limits import Limiter, Refused

GOOD = """\
upstreams:
  hosted:
    kind: openai
    base_url: https://api.example.com/v1/
    api_key_secret: HOSTED_KEY
    rate_cap: {requests_per_minute: 120, max_concurrency: 4}
    breaker: {failures: 2, window_s: 10, cooldown_s: 30}
    endpoints: [embeddings, rerank]
    set_params: {dimensions: 256}
    strip_params: [user]
  peer:
    kind: sie
    base_url: http://127.0.0.1:8080
    rate_cap: {requests_per_minute: 60, max_concurrency: 1}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "upstreams.yaml"
    path.write_text(text)
    return path


def test_a_valid_file_loads_with_its_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    upstreams = load_upstreams(write(tmp_path, GOOD))
    hosted, peer = upstreams["hosted"], upstreams["peer"]
    assert hosted.kind is UpstreamKind.OPENAI and hosted.base_url == "https://api.example.com/v1"
    assert hosted.endpoints == {Endpoint.EMBEDDINGS, Endpoint.RERANK}
    assert hosted.apply_params({"model": "m", "input": ["x"], "user": "u"}) == {
        "model": "m",
        "input": ["x"],
        "dimensions": 256,
    }
    assert peer.kind is UpstreamKind.SIE and peer.breaker.failures == 5  # the default breaker
    with pytest.raises(UpstreamCredentialError, match="HOSTED_KEY is not set"):
        hosted.api_key()
    monkeypatch.setenv("HOSTED_KEY", " sk-live\n")
    assert hosted.api_key() == "sk-live"  # read now, a secret file's newline dropped
    assert load_upstreams(write(tmp_path, "")) == {}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("https://api.example.com/v1/", "http://api.example.com/v1"), "must use https outside loopback"),
        (
            ("https://api.example.com/v1/", "https://user:hunter2@api.example.com"),
            "must not carry credentials",
        ),
        (("https://api.example.com/v1/", "https://api.example.com/v1?key=hunter2"), "query or a fragment"),
        (("https://api.example.com/v1/", "ftp://api.example.com"), "http or https URL"),
        (
            ("api_key_secret: HOSTED_KEY", "api_key_secret: sk-hunter2-live"),
            "must name an environment variable",
        ),
        (("set_params: {dimensions: 256}", "set_params: {model: other}"), "sent by the server itself"),
        (("strip_params: [user]", "strip_params: [dimensions]"), "both name dimensions"),
        (("endpoints: [embeddings, rerank]", "endpoints: [embeddings, speech]"), "endpoints"),
        (("    endpoints: [embeddings, rerank]\n", ""), "must declare the endpoints"),
        (("  hosted:", "  Hosted_1:"), "lowercase letters, digits and hyphens"),
        (("    rate_cap: {requests_per_minute: 120, max_concurrency: 4}\n", ""), "rate_cap: Field required"),
        (("kind: sie", "kind: sie\n    endpoints: [chat]"), "kind sie takes no"),
        (("    strip_params: [user]\n", "    strip_params: [user]\n    kind: openai\n"), "line 11"),
    ],
)
def test_a_bad_file_is_refused_without_repeating_the_value(tmp_path: Path, change, reason: str):
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(UpstreamConfigError) as info:
        load_upstreams(path)
    assert str(path) in str(info.value) and reason in str(info.value)
    assert "hunter2" not in str(info.value)


def test_the_remote_serving_switch_reads_as_the_public_server():
    assert remote_serving_from_env(None) and remote_serving_from_env(" Yes ")
    assert not remote_serving_from_env("0") and not remote_serving_from_env("enabled")


def test_the_limiter_refuses_over_the_rate_and_the_concurrency_at_once():
    from sie.upstream.config import Breaker, RateCap

    limiter = Limiter(RateCap(requests_per_minute=2, max_concurrency=2), Breaker(), now=0.0)
    assert limiter.acquire(0.0) is None and limiter.acquire(0.0) is None
    assert limiter.acquire(0.0) == Refused("busy", 1.0)  # both slots in flight
    limiter.release(0.1, unavailable=False)
    refused = limiter.acquire(0.1)  # a slot is free, the minute's budget is not
    assert refused is not None and refused.kind == "busy" and refused.wait_s == pytest.approx(29.9)
    assert limiter.acquire(30.1) is None  # half a minute refills one call


def test_the_breaker_opens_after_failures_in_a_row_and_one_probe_closes_it():
    from sie.upstream.config import Breaker, RateCap

    limiter = Limiter(
        RateCap(requests_per_minute=600, max_concurrency=4), Breaker(failures=2, cooldown_s=30), 0.0
    )
    for t in (1.0, 2.0):
        assert limiter.acquire(t) is None
        limiter.release(t, unavailable=True)
    assert limiter.acquire(3.0) == Refused("unavailable", 29.0)
    assert limiter.acquire(32.0) is None  # the probe
    assert limiter.acquire(32.0) == Refused("unavailable", 1.0)  # one probe at a time
    limiter.release(33.0, unavailable=False)
    assert limiter.acquire(33.0) is None and limiter.acquire(33.0) is None
