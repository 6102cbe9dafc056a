"""``sie-server serve`` with ``SIE_NATS_URL`` set is also a queue-mode worker: a work item published to
its lane's subject on a real nats-server is answered on the item's inbox with the vector the HTTP route
gives, while the HTTP API keeps serving."""

from __future__ import annotations

from pathlib import Path

import msgpack
import nats
import numpy as np

from sie.queue.contract import lane_of
from sie.wire.requests import Item
from tests.e2e.conftest import MODEL, run_server
from tests.queue.wire_gateway import Gateway


async def test_serve_with_a_nats_url_answers_work_items(nats_url: str, tmp_path: Path):
    env = {
        "SIE_NATS_URL": nats_url,
        "SIE_WORKER_ID": "e2e-worker",
        "SIE_DEFAULT_COMPUTE_PRECISION": "float32",
    }
    with run_server(tmp_path, env) as server:
        client = await nats.connect(nats_url)
        try:
            gateway = Gateway(client, lane_of("", None, None))  # nothing configured on either side
            await gateway.start()
            sent = await gateway.publish(MODEL, item=Item(id="a", text="through the queue"))
            (result,) = await gateway.wait_for(1, 30)
        finally:
            await client.close()
        assert (result.work_item_id, result.success, result.worker_id) == (sent, True, "e2e-worker")
        body = msgpack.unpackb(result.result_msgpack)
        got = np.frombuffer(body["dense"]["values"][b"data"], dtype=np.float32)
        (expected,) = server.encode(["through the queue"])
        assert body["id"] == "a" and np.allclose(got, expected, atol=1e-6)
        server.assert_serving()
    assert "pulling sie.work.default.default.default.* as e2e-worker" in server.log()
