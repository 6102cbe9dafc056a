"""How a hot POST route is declared: a Starlette route plus what ``/openapi.json`` says of it, shared by
the server's and the gateway's inference routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass(frozen=True)
class HeaderParam:
    """A request header a route reads, as ``/openapi.json`` declares it: optional, a string, one of
    ``values`` when given (so a fuzzer sends another only as data the route must refuse)."""

    name: str
    description: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class PostRoute:
    """A POST route that Starlette serves directly, documented in ``/openapi.json`` from this record.

    The inference routes skip FastAPI's per-request machinery (dependency solving, parameter
    validation, its request wrapper): their bodies are msgspec structs decoded by the handler anyway,
    and that machinery was a third of the event loop's time per small request (server CPU per
    single-item request 605-804 us -> 466-506 us, docs/benchmarks.md). The handler takes the
    ``Request``; ``path_params`` holds ``{model}``.
    """

    path: str
    endpoint: Callable[[Request], Awaitable[Response]]
    tags: tuple[str, ...]
    request: type
    response: type | None
    json_only: bool = False  # the OpenAI route speaks JSON alone
    # Errors in OpenAI's ``{"error": {...}}`` envelope (with the table's OpenAI status and code) instead
    # of the native ``{"detail": {...}}``; ``/openapi.json`` and the body-size limit follow it.
    openai_errors: bool = False
    headers: tuple[HeaderParam, ...] = ()  # the request headers it reads, documented as parameters

    def route(self) -> Route:
        return Route(self.path, self.endpoint, methods=["POST"])
