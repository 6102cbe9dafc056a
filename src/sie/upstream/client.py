"""One upstream's HTTP client: a JSON POST in, the answer's JSON object out, or one of
``sie.upstream.errors``.

The upstream is outside this deployment, so the client trusts nothing it sends back: no redirect is
followed (a key never goes to a host the operator did not name), proxy variables of the environment
are ignored (only the file's ``proxy_url``), the body is read uncompressed under a byte cap and the
whole call under a deadline, and an error answer is read (64 KiB at most) only for its code. The key
is read from its environment variable on every call and never logged; the bearer header is the only
credential sent, the caller's own never is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpx

from sie.upstream.config import Upstream, UpstreamCredentialError
from sie.upstream.errors import (
    FailureKind,
    UpstreamBusy,
    UpstreamFailed,
    UpstreamInputTooLong,
    UpstreamNotReady,
    UpstreamRefusedInput,
    clamp_wait,
)
from sie.upstream.limits import Limiter
from sie.wire.errors import ErrorCode

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S: Final = 5.0
READ_TIMEOUT_S: Final = 10.0
DEADLINE_S: Final = 60.0
DEFAULT_RETRY_AFTER_S: Final = 5
_ERROR_BODY_MAX_BYTES: Final = 64 << 10
_NOT_READY: Final = frozenset({"MODEL_LOADING", "PROVISIONING", "LORA_LOADING"})
_BUSY: Final = frozenset({"QUEUE_FULL", "RESOURCE_EXHAUSTED", "BILLING_CAPACITY_UNAVAILABLE"})
_FINAL: Final = frozenset({"MODEL_LOAD_FAILED", "ACCOUNT_STATE_UNAVAILABLE", "COLD_START_RATE_LIMITED"})
# An SIE upstream names its error code in this header too; read first, as the public server reads it.
_ERROR_CODE_HEADER: Final = "X-SIE-Error-Code"
_KNOWN_CODES: Final = frozenset(code.value for code in ErrorCode)


class UpstreamClient:
    """Calls to one named upstream, through its ``Limiter``; ``clock`` is ``time.monotonic``."""

    def __init__(
        self,
        name: str,
        upstream: Upstream,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name, self.upstream = name, upstream
        self._clock = clock
        self._limiter = Limiter(upstream.rate_cap, upstream.breaker, clock())
        self._http = httpx.AsyncClient(
            base_url=upstream.base_url,
            follow_redirects=False,
            trust_env=False,
            proxy=upstream.proxy_url if transport is None else None,
            transport=transport,
            timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            limits=httpx.Limits(max_connections=upstream.rate_cap.max_concurrency),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def post(self, path: str, body: Mapping[str, Any], max_bytes: int, model: str) -> dict[str, Any]:
        """POST ``body`` (the operator's ``set_params``/``strip_params`` applied) to ``path`` under the
        base URL; ``model`` names the SIE model in the errors a caller sees."""
        refused = self._limiter.acquire(self._clock())
        if refused is not None:
            raise UpstreamBusy(model, self.name, refused.kind, clamp_wait(refused.wait_s))
        unavailable = True
        try:
            async with asyncio.timeout(DEADLINE_S):
                raw = await self._send(path, self.upstream.apply_params(body), max_bytes, model)
            unavailable = False
        except TimeoutError:
            raise UpstreamBusy(model, self.name, "unavailable", DEFAULT_RETRY_AFTER_S) from None
        except (UpstreamBusy, UpstreamNotReady):
            raise
        except Exception:
            unavailable = False  # the upstream answered: its refusal says nothing of its health
            raise
        finally:
            self._limiter.release(self._clock(), unavailable)
        try:
            answer = json.loads(raw)
        except ValueError:
            raise UpstreamFailed(model, self.name, "its answer is not JSON") from None
        if not isinstance(answer, dict):
            raise UpstreamFailed(model, self.name, "its answer is not a JSON object")
        return answer

    async def _send(self, path: str, body: Mapping[str, Any], max_bytes: int, model: str) -> bytes:
        content = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
        }
        try:
            key = self.upstream.api_key()
        except UpstreamCredentialError as exc:
            log.error("upstream %r: %s", self.name, exc)  # the variable's name, never its value
            raise UpstreamFailed(model, self.name, "its credential is not configured") from None
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        request = self._http.build_request("POST", path.lstrip("/"), content=content, headers=headers)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            log.warning("upstream %r: request failed (%s)", self.name, type(exc).__name__)
            raise UpstreamBusy(model, self.name, "unavailable", DEFAULT_RETRY_AFTER_S) from None
        try:
            if 300 <= response.status_code < 400:
                raise UpstreamFailed(model, self.name, "it answered with a redirect, which is refused")
            if response.status_code >= 400:
                detail = await _read(response, _ERROR_BODY_MAX_BYTES, cut=True)
                raise self._failure(response, _error_code(response.headers, detail), model)
            if response.headers.get("content-encoding", "identity").lower() not in ("identity", ""):
                raise UpstreamFailed(model, self.name, "it sent a compressed answer, which is refused")
            raw = await _read(response, max_bytes)
            if raw is None:
                raise UpstreamFailed(model, self.name, f"its answer is larger than {max_bytes} bytes")
            return raw
        except httpx.TransportError as exc:
            log.warning("upstream %r: answer failed (%s)", self.name, type(exc).__name__)
            raise UpstreamBusy(model, self.name, "unavailable", DEFAULT_RETRY_AFTER_S) from None
        finally:
            await response.aclose()

    def _failure(self, response: httpx.Response, code: str | None, model: str) -> Exception:
        status = response.status_code
        wait = _retry_after(response.headers.get("retry-after"))
        log.warning("upstream %r answered %d %s", self.name, status, code or "")
        if code in _FINAL or status in (501, 505):
            return UpstreamFailed(model, self.name, f"it answered {status}")
        if status == 429:
            return UpstreamBusy(model, self.name, "busy", wait or DEFAULT_RETRY_AFTER_S)
        if status >= 500:
            if code in _NOT_READY:
                return UpstreamNotReady(model, self.name, wait or DEFAULT_RETRY_AFTER_S)
            kind: FailureKind = "busy" if code in _BUSY else "unavailable"
            return UpstreamBusy(model, self.name, kind, wait or DEFAULT_RETRY_AFTER_S)
        if code == ErrorCode.INPUT_TOO_LONG:
            return UpstreamInputTooLong(model, self.name)
        if code == ErrorCode.INVALID_INPUT and status in (400, 422):
            return UpstreamRefusedInput(model, self.name)
        return UpstreamFailed(model, self.name, f"it answered {status}")


async def _read(response: httpx.Response, limit: int, cut: bool = False) -> bytes | None:
    """At most ``limit`` bytes of the body; past it, None (or the first ``limit`` when ``cut``)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)[:limit] if cut else None
        chunks.append(chunk)
    return b"".join(chunks)


def _error_code(headers: httpx.Headers, raw: bytes | None) -> str | None:
    """The code of an error answer: a known one in ``X-SIE-Error-Code``, else the body's ``{code}``,
    ``{detail: {code}}`` or OpenAI's ``{error: {code}}``."""
    named = headers.get(_ERROR_CODE_HEADER)
    if isinstance(named, str) and named in _KNOWN_CODES:
        return named
    try:
        body = json.loads(raw or b"")
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    for key in ("detail", "error"):
        nested = body.get(key)
        if isinstance(nested, dict) and isinstance(nested.get("code"), str):
            return str(nested["code"])
    code = body.get("code")
    return code if isinstance(code, str) else None


def _retry_after(raw: str | None) -> int | None:
    """``Retry-After`` in seconds or as a date, clamped to 1-60 s; None when absent or unreadable."""
    if not raw:
        return None
    try:
        return clamp_wait(float(raw))
    except ValueError:
        pass
    try:
        return clamp_wait(parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None
