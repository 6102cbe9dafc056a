"""``/ws/status``: the worker status (``server.status``) pushed as one JSON text message every 200 ms."""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketState

from sie.server.status import status_message
from sie.wire import codec

log = logging.getLogger(__name__)
router = APIRouter(tags=["status"])

PERIOD_S: Final = 0.2


@router.websocket("/ws/status")
async def ws_status(websocket: WebSocket) -> None:
    await websocket.accept()
    state = websocket.state
    try:
        while websocket.client_state is WebSocketState.CONNECTED:
            message = status_message(
                state.engine, state.status_identity, state.lifecycle, state.metrics.registry
            )
            await websocket.send_text(codec.encode_json(message).decode())
            await asyncio.sleep(PERIOD_S)
    except (WebSocketDisconnect, OSError):  # the client left, or the server is closing the connection
        pass
