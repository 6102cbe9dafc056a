"""Remote serving on the standalone server: which profile serves a request (``router``) and the
encode and score calls through an upstream (``serve``), in the engine's own response shapes."""

from __future__ import annotations

from typing import Final

from fastapi import Request

from sie.http.routes import HeaderParam
from sie.server.remote.router import FORBID, REMOTE_HEADER, Router, forbids_remote

REMOTE_PARAM: Final = HeaderParam(
    REMOTE_HEADER,
    "`forbid` (the one value accepted; any other answers 400) keeps the request off every remote "
    "profile: a fallback model answers or refuses it locally, a model served only by an upstream answers "
    "400. The answer says who served it: `X-SIE-Served-By` (`local` or `remote`), with `X-SIE-Upstream`, "
    "`X-SIE-Fallback-Reason` and, on a failed bridge, `X-SIE-Fallback-Error`.",
    (FORBID,),
)
"""What ``/openapi.json`` says of ``X-SIE-Remote`` on every route that reads it."""


def router_of(request: Request) -> Router:
    router: Router = request.state.router
    return router


def remote_header(request: Request) -> list[str]:
    """Every ``X-SIE-Remote`` value the request carries (``Router`` refuses anything but one ``forbid``)."""
    return request.headers.getlist(REMOTE_HEADER)


def check_remote_header(request: Request) -> None:
    """For a route no upstream serves (extract): ``X-SIE-Remote`` is still checked, so a value other
    than ``forbid`` answers 400 on every route that documents it, and ``forbid`` changes nothing."""
    forbids_remote(remote_header(request))
