"""The gateway's status page: ``GET /`` (one HTML page, no assets) kept live by ``/ws/cluster-status``,
which pushes the cluster as the gateway sees it every second: workers (pool, profile, bundle, loaded
models, queue depth, health), models, pools and leases, and the error rate since the last message.

A snapshot costs 1 + P reads of the pools bucket (P pools), so one ``StatusFeed`` builds one a second
for every viewer, and only while there is one; viewers are capped
(``SIE_GATEWAY_STATUS_MAX_CONNECTIONS``), and the socket only pushes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from sie.gateway.cluster_api import health_body
from sie.gateway.state import GatewayState

log = logging.getLogger(__name__)

PERIOD_S: Final = 1.0
# RFC 6455 close codes: the server is at its limit (the client may come back), and a frame this
# endpoint does not take (it only pushes).
TRY_AGAIN_LATER: Final = 1013
UNSUPPORTED_DATA: Final = 1003


def _answers(state: GatewayState) -> tuple[float, float]:
    """Requests answered so far, and how many of them were 5xx (the gateway's own counter)."""
    total = errors = 0.0
    for family in state.metrics.requests.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                total += sample.value
                if sample.labels.get("status", "").startswith("5"):
                    errors += sample.value
    return total, errors


async def cluster_status(state: GatewayState, since: tuple[float, float]) -> dict[str, Any]:
    body = health_body(state)
    pools = [
        {
            "name": view["name"],
            "state": view["status"]["state"],
            "gpus": view["spec"]["gpus"],
            "bundle": view["spec"]["bundle"],
            "workers": [w["name"] for w in view["status"]["assigned_workers"]],
            "last_renewed": view["status"]["last_renewed"],
        }
        for view in (await state.pools.all() if state.pools is not None else [])
    ]
    total, errors = _answers(state)
    answered, failed = total - since[0], errors - since[1]
    return {
        "timestamp": time.time(),
        **body,
        "pools": pools,
        "recent": {
            "requests": answered,
            "errors": failed,
            "error_rate": failed / answered if answered else 0.0,
        },
    }


class StatusFeed:
    """The one producer of ``/ws/cluster-status`` snapshots and its viewers.

    The producer task runs while at least one viewer is connected: a snapshot per ``period_s``,
    encoded once and sent to all, so what the bucket and the encoder cost does not grow with
    viewers. A viewer that connects gets the latest snapshot at once, then each new one; a slow
    viewer skips the ones it missed instead of queueing them. Past ``max_viewers`` a connection is
    closed ``TRY_AGAIN_LATER``; a viewer that sends anything is closed ``UNSUPPORTED_DATA``.
    """

    def __init__(self, state: GatewayState, max_viewers: int, period_s: float = PERIOD_S) -> None:
        self._state = state
        self._max_viewers = max_viewers
        self._period_s = period_s
        self._viewers = 0
        self._latest: str | None = None
        self._fresh = asyncio.Event()  # set, then replaced, each time ``_latest`` changes
        self._producer: asyncio.Task[None] | None = None

    async def serve(self, websocket: WebSocket) -> None:
        await websocket.accept()
        if self._viewers >= self._max_viewers:
            reason = (
                f"at most {self._max_viewers} /ws/cluster-status connections "
                "(SIE_GATEWAY_STATUS_MAX_CONNECTIONS); try again later"
            )
            await websocket.close(TRY_AGAIN_LATER, reason)
            return
        self._join()
        pushing = asyncio.create_task(self._push(websocket))
        listening = asyncio.create_task(self._refuse_input(websocket))
        try:  # until the viewer leaves, sends, or cannot be sent to
            await asyncio.wait({pushing, listening}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            pushing.cancel()
            listening.cancel()
            await asyncio.gather(pushing, listening, return_exceptions=True)
            self._leave()

    def _join(self) -> None:
        self._viewers += 1
        if self._producer is None:
            self._fresh = asyncio.Event()  # on the running loop
            self._producer = asyncio.create_task(self._produce(), name="sie-gateway-cluster-status")
            self._producer.add_done_callback(_report_death)

    def _leave(self) -> None:
        self._viewers -= 1
        if self._viewers == 0 and self._producer is not None:
            self._producer.cancel()
            self._producer, self._latest = None, None

    async def _produce(self) -> None:
        since = _answers(self._state)
        while True:
            try:
                snapshot = await cluster_status(self._state, since)
            except Exception:  # NATS away: the viewers keep the last snapshot until it answers again
                log.warning("building the cluster status failed", exc_info=True)
            else:
                since = (
                    since[0] + snapshot["recent"]["requests"],
                    since[1] + snapshot["recent"]["errors"],
                )
                self._latest = json.dumps(snapshot)
                fresh, self._fresh = self._fresh, asyncio.Event()
                fresh.set()
            await asyncio.sleep(self._period_s)

    async def _push(self, websocket: WebSocket) -> None:
        sent: str | None = None
        with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
            while True:
                fresh, latest = self._fresh, self._latest
                if latest is not None and latest is not sent:
                    await websocket.send_text(latest)
                    sent = latest
                await fresh.wait()

    async def _refuse_input(self, websocket: WebSocket) -> None:
        """Until the viewer leaves (its slot is free at once); a frame from it closes the socket."""
        with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
            message = await websocket.receive()
            if message["type"] == "websocket.receive":
                await websocket.close(UNSUPPORTED_DATA, "/ws/cluster-status only pushes")


def _report_death(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the cluster status feed died", exc_info=task.exception())


async def page(_: Request) -> HTMLResponse:
    return HTMLResponse(PAGE)


def routes(state: GatewayState, max_viewers: int) -> list[BaseRoute]:
    """``/`` and ``/ws/cluster-status``, whose viewers share one ``StatusFeed``."""
    feed = StatusFeed(state, max_viewers)
    return [Route("/", page), WebSocketRoute("/ws/cluster-status", feed.serve)]


PAGE: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sie cluster</title>
<style>
 body{font:14px system-ui,sans-serif;margin:24px;color:#1d2330;background:#f6f7f9}
 h1{font-size:20px;margin:0 0 4px} h2{font-size:15px;margin:22px 0 8px}
 .sub{color:#5a6272;margin-bottom:16px} .cards{display:flex;gap:12px;flex-wrap:wrap}
 .card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:10px 16px;min-width:120px}
 .card b{display:block;font-size:22px} table{border-collapse:collapse;width:100%;background:#fff}
 th,td{border-bottom:1px solid #e6e9ef;padding:6px 10px;text-align:left;vertical-align:top}
 th{background:#eef1f5;font-weight:600} .ok{color:#137333;font-weight:600} .bad{color:#b3261e;font-weight:600}
 .empty{color:#8a90a0} #conn{float:right}
</style></head><body>
<span id="conn" class="bad">connecting</span>
<h1>sie cluster</h1><div class="sub" id="updated">waiting for /ws/cluster-status</div>
<div class="cards">
 <div class="card">status<b id="status">-</b></div><div class="card">workers<b id="workers">-</b></div>
 <div class="card">GPUs<b id="gpus">-</b></div><div class="card">models loaded<b id="models">-</b></div>
 <div class="card">error rate<b id="errors">-</b></div>
</div>
<h2>Workers</h2><table><thead><tr><th>worker</th><th>pool</th><th>profile</th><th>bundle</th><th>health</th>
<th>queue</th><th>loaded models</th></tr></thead><tbody id="worker-rows"></tbody></table>
<h2>Models</h2><table><thead><tr><th>model</th><th>workers</th><th>profiles</th><th>queued</th></tr></thead>
<tbody id="model-rows"></tbody></table>
<h2>Pools and leases</h2><table><thead><tr><th>pool</th><th>state</th><th>GPUs</th><th>bundle</th>
<th>workers</th><th>lease renewed</th></tr></thead><tbody id="pool-rows"></tbody></table>
<script>
const $ = (id) => document.getElementById(id);
const cell = (v) => { const td = document.createElement("td"); td.textContent = v; return td; };
function rows(id, items, columns, empty) {
  const body = $(id); body.replaceChildren();
  if (!items.length) { const tr = document.createElement("tr"); const td = cell(empty);
    td.colSpan = 8; td.className = "empty"; tr.append(td); body.append(tr); return; }
  for (const item of items) { const tr = document.createElement("tr");
    for (const c of columns) { const td = cell(c(item)); if (c.cls) td.className = c.cls(item); tr.append(td); }
    body.append(tr); }
}
function health(w) { return w.healthy ? "healthy" : "not ready"; }
health.cls = (w) => w.healthy ? "ok" : "bad";
function show(s) {
  $("status").textContent = s.status; $("status").className = s.status === "healthy" ? "ok" : "bad";
  $("workers").textContent = s.cluster.worker_count; $("gpus").textContent = s.cluster.gpu_count;
  $("models").textContent = s.cluster.models_loaded;
  $("errors").textContent = (100 * s.recent.error_rate).toFixed(1) + "%";
  $("updated").textContent = "updated " + new Date(s.timestamp * 1000).toLocaleTimeString()
    + " \\u00b7 configured profiles: " + (s.configured_gpu_types.join(", ") || "any");
  rows("worker-rows", s.workers, [w => w.name, w => w.pool_name, w => w.machine_profile, w => w.bundle,
    health, w => w.queue_depth, w => w.loaded_models.join(", ") || "none"], "no worker");
  rows("model-rows", s.models, [m => m.name, m => m.worker_count, m => m.gpu_types.join(", "),
    m => m.total_queue_depth], "no model loaded");
  rows("pool-rows", s.pools, [p => p.name, p => p.state,
    p => Object.entries(p.gpus).map(([k, v]) => k + " \u00d7 " + v).join(", ") || "any", p => p.bundle || "any",
    p => p.workers.join(", ") || "none", p => new Date(p.last_renewed * 1000).toLocaleTimeString()], "no pool");
}
function connect() {
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/cluster-status");
  ws.onopen = () => { $("conn").textContent = "live"; $("conn").className = "ok"; };
  ws.onmessage = (event) => show(JSON.parse(event.data));
  ws.onclose = () => { $("conn").textContent = "reconnecting"; $("conn").className = "bad"; setTimeout(connect, 1000); };
}
connect();
</script></body></html>
"""
