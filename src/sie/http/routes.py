"""How a hot POST route is declared: a Starlette route plus what ``/openapi.json`` says of it, shared by
the server's and the gateway's inference routes."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send


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


class HotRoutes:
    """Serves the hot POST routes straight from the innermost middleware, past Starlette's exception
    layer, FastAPI's exit stack, the router and the route's own wrapper: four ASGI layers and their
    send wrappers a lone request paid for nothing (0.1 M of its 3.1 M instructions,
    ``bench.instructions``). A route is matched as the router matches it (its pattern, its method;
    anything else goes on to the app and its 404 or 405), and an error its handler raises is answered
    by the app's own exception handlers, found as Starlette finds them (the exception's classes in
    order, a status handler for an ``HTTPException``); an error with none, or one raised once the
    answer has started, goes up to the app's catch-all as before."""

    def __init__(
        self, app: ASGIApp, routes: Sequence[Route], handlers: Mapping[Any, Callable[..., Any]]
    ) -> None:
        self.app = app
        self.routes = tuple(routes)
        self.handlers = handlers  # the app's own table, read per error (handlers added later count)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            for route in self.routes:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child)
                    await self._serve(route.endpoint, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(
        self, endpoint: Callable[[Request], Awaitable[Response]], scope: Scope, receive: Receive, send: Send
    ) -> None:
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            answer = handler(request, exc)  # the app's handlers are coroutines; a plain one is allowed
            response = await answer if inspect.isawaitable(answer) else answer
            exc.__traceback__ = None  # a reused exception instance would grow its traceback
            if response is None:
                return
        await response(scope, receive, send)

    def _handler(self, exc: Exception) -> Callable[..., Any] | None:
        handlers = self.handlers
        if isinstance(exc, HTTPException) and exc.status_code != 500 and exc.status_code in handlers:
            return handlers[exc.status_code]
        for cls in type(exc).__mro__:
            if cls is Exception:  # the catch-all is the outermost layer's, as in Starlette
                return None
            if cls in handlers:
                return handlers[cls]
            if cls is HTTPException:  # Starlette's own default, where the app set none
                return _http_exception
        return None


async def _http_exception(_: Request, exc: HTTPException) -> Response:
    """Starlette's answer to an ``HTTPException`` no handler takes: its detail as text, no body on a
    204 or 304."""
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)
