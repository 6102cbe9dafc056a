"""The standalone server's status page: ``GET /`` (it used to redirect to ``/docs``, which it links), one HTML page kept live by ``/ws/status`` (the
worker status message a gateway reads): readiness, devices, and every model with its state, device,
memory and queue."""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(tags=["status"])


@router.get("/", include_in_schema=False)
async def page() -> HTMLResponse:
    return HTMLResponse(PAGE)


PAGE: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sie-server</title>
<style>
 body{font:14px system-ui,sans-serif;margin:24px;color:#1d2330;background:#f6f7f9}
 h1{font-size:20px;margin:0 0 4px} h2{font-size:15px;margin:22px 0 8px} .sub{color:#5a6272}
 table{border-collapse:collapse;width:100%;background:#fff}
 th,td{border-bottom:1px solid #e6e9ef;padding:6px 10px;text-align:left} th{background:#eef1f5}
 .ok{color:#137333;font-weight:600} .bad{color:#b3261e;font-weight:600} .empty{color:#8a90a0}
 #conn{float:right}
</style></head><body>
<span id="conn" class="bad">connecting</span>
<h1 id="title">sie-server</h1><div class="sub" id="sub">waiting for /ws/status</div>
<div class="sub"><a href="/docs">API docs</a> &middot; <a href="/metrics">metrics</a></div>
<h2>Models</h2><table><thead><tr><th>model</th><th>state</th><th>device</th><th>memory</th><th>queued</th>
<th>pending items</th><th>outputs</th></tr></thead><tbody id="model-rows"></tbody></table>
<h2>Devices</h2><table><thead><tr><th>device</th><th>name</th><th>memory</th><th>utilization</th></tr></thead>
<tbody id="gpu-rows"></tbody></table>
<script>
const $ = (id) => document.getElementById(id);
const mb = (b) => (b / 1048576).toFixed(0) + " MB";
function rows(id, items, columns, empty) {
  const body = $(id); body.replaceChildren();
  if (!items.length) { const tr = document.createElement("tr"); const td = document.createElement("td");
    td.textContent = empty; td.colSpan = 7; td.className = "empty"; tr.append(td); body.append(tr); return; }
  for (const item of items) { const tr = document.createElement("tr");
    for (const c of columns) { const td = document.createElement("td"); td.textContent = c(item); tr.append(td); }
    body.append(tr); }
}
function show(s) {
  $("title").textContent = "sie-server " + s.server.version + (s.name ? " \\u00b7 " + s.name : "");
  $("sub").textContent = (s.ready ? "ready" : "not ready") + " \\u00b7 bundle " + s.bundle
    + " \\u00b7 up " + s.server.uptime_seconds + " s \\u00b7 updated " + new Date(s.timestamp * 1000).toLocaleTimeString();
  $("sub").className = s.ready ? "ok" : "bad";
  rows("model-rows", s.models, [m => m.name, m => m.state, m => m.device || "-", m => mb(m.memory_bytes),
    m => m.queue_depth, m => m.queue_pending_items, m => m.config.outputs.join(", ")], "no model");
  rows("gpu-rows", s.gpus, [g => g.device, g => g.name, g => mb(g.memory_used_bytes) + " / " + mb(g.memory_total_bytes),
    g => g.utilization_pct + "%"], "CPU only");
}
function connect() {
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/status");
  ws.onopen = () => { $("conn").textContent = "live"; $("conn").className = "ok"; };
  ws.onmessage = (event) => show(JSON.parse(event.data));
  ws.onclose = () => { $("conn").textContent = "reconnecting"; $("conn").className = "bad"; setTimeout(connect, 1000); };
}
connect();
</script></body></html>
"""
