"""Remote serving on the standalone server: which profile serves a request (``router``) and the
encode and score calls through an upstream (``serve``), in the engine's own response shapes."""

from __future__ import annotations

from fastapi import Request

from sie.server.remote.router import REMOTE_HEADER, Router


def router_of(request: Request) -> Router:
    router: Router = request.state.router
    return router


def remote_header(request: Request) -> list[str]:
    """Every ``X-SIE-Remote`` value the request carries (``Router`` refuses anything but one ``forbid``)."""
    return request.headers.getlist(REMOTE_HEADER)
