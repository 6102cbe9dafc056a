"""``sie-server serve`` with ``SIE_NATS_URL`` set is also a queue-mode worker: a work item published to
its lane's subject on a real nats-server is answered on the item's inbox with the vector the HTTP route
gives, while the HTTP API keeps serving. The workers are the session's ``queue_cluster``'s; the item is
published by hand, past the gateway."""

from __future__ import annotations

import msgpack
import nats
import numpy as np

from sie.queue.contract import lane_of
from sie.wire.requests import Item
from tests.e2e.conftest import MODEL, QueueCluster
from tests.queue.wire_gateway import Gateway


async def test_serve_with_a_nats_url_answers_work_items(queue_cluster: QueueCluster):
    client = await nats.connect(queue_cluster.nats_url)
    try:
        gateway = Gateway(client, lane_of("", None, None))  # nothing configured on either side
        await gateway.start()
        sent = await gateway.publish(MODEL, item=Item(id="a", text="through the queue"))
        (result,) = await gateway.wait_for(1, 30)
    finally:
        await client.close()
    assert (result.work_item_id, result.success) == (sent, True)
    server = queue_cluster.workers[result.worker_id]
    body = msgpack.unpackb(result.result_msgpack)
    got = np.frombuffer(body["dense"]["values"][b"data"], dtype=np.float32)
    (expected,) = server.encode(["through the queue"])
    assert body["id"] == "a" and np.allclose(got, expected, atol=1e-6)
    server.assert_serving()
    assert f"pulling sie.work.default.default.default.* as {result.worker_id}" in server.log()
