"""``HotRoutes`` answers its routes exactly as the app behind it would: the same handlers for the same
errors, the catch-all's 500 for the rest, and the app's own 404 and 405 for what it does not serve."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sie.catalog.errors import InvalidInput
from sie.http.errors import Envelope, install
from sie.http.routes import HotRoutes


def app_with(hot: bool) -> tuple[Starlette, list[str]]:
    served: list[str] = []

    async def answer(request: Request) -> Response:
        what = request.path_params["what"]
        served.append(what)
        if what == "bad":
            raise InvalidInput("no such thing")
        if what == "teapot":
            raise HTTPException(418, "short and stout")
        if what == "bug":
            raise KeyError("secret")
        return JSONResponse({"what": what, "body": (await request.body()).decode()})

    routes = [Route("/v1/thing/{what}", answer, methods=["POST"])]
    app = Starlette(routes=list(routes))
    install(app, Envelope.NATIVE)
    if hot:
        app.add_middleware(HotRoutes, routes=routes, handlers=app.exception_handlers)
    return app, served


async def answers(app: Starlette) -> list[tuple[int, str]]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        got = [
            await client.post("/v1/thing/ok", content=b"payload"),
            await client.post("/v1/thing/bad"),
            await client.post("/v1/thing/teapot"),
            await client.post("/v1/thing/bug"),
            await client.get("/v1/thing/ok"),  # the route, another method: 405
            await client.post("/v1/other"),  # no route: 404
        ]
    return [(r.status_code, r.text) for r in got]


async def test_the_hot_path_answers_as_the_router_does() -> None:
    through_router, _ = app_with(hot=False)
    hot, served = app_with(hot=True)
    want = await answers(through_router)
    assert await answers(hot) == want
    assert [status for status, _ in want] == [200, 400, 418, 500, 405, 404]
    assert '"body":"payload"' in want[0][1] and "secret" not in want[3][1]
    assert served == ["ok", "bad", "teapot", "bug"]  # the GET and the unknown path never reached it


async def test_the_route_table_is_not_consulted_for_a_hot_route() -> None:
    """The router's own table lacks the route here: only ``HotRoutes`` can have answered."""

    async def answer(request: Request) -> Response:
        return JSONResponse({"model": request.path_params["model"]})

    route = Route("/v1/encode/{model:path}", answer, methods=["POST"])
    app = Starlette(routes=[])
    install(app, Envelope.NATIVE)
    app.add_middleware(HotRoutes, routes=[route], handlers=app.exception_handlers)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        answered = await client.post("/v1/encode/BAAI/bge-m3")
    assert answered.status_code == 200 and answered.json() == {"model": "BAAI/bge-m3"}
