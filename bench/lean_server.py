"""The leanest Python server of one encode: what any asyncio front end costs around the floor.

``scripts/bench --host-path --lean`` runs it beside ours so the host path's targets can be read
against what a Python server *can* reach on the same machine in the same run: uvicorn (uvloop and
httptools, as ours), a raw ASGI callable with no framework, no middleware, no admission, batching,
metrics or usage, msgpack in and out, and one hand-off of the forward to a device thread, which
every server that keeps its event loop free must pay. The forward is the floor's own (our packed
adapter through ``ModelRunner``, ``bench.packed_ab``'s forward and pooling), so the lean server and
the floor differ only by HTTP, decoding and that hand-off.

It is a yardstick, not a product: it answers ``POST /v1/encode/{model}`` (msgpack, text items)
and ``GET /v1/models/{model}`` (readiness), and nothing else.

    python -m bench.lean_server FOLDER PORT
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import msgpack
import numpy as np

from bench import corpus, random_models

Message = dict[str, Any]


def load(folder: Path) -> tuple[Any, Any]:
    """Our dense adapter on the near-free model and a ``ModelRunner`` over it, on one thread (a lone
    query's forward is too small to split, as the server decides too)."""
    import torch

    from sie.adapters.contract import Adapter, LoadSpec
    from sie.adapters.dense_torch import TorchDenseEncoder
    from sie.core.options import ComputePrecision
    from sie.engine.runner import ModelRunner

    torch.set_num_threads(1)
    encoder = TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, corpus.MAX_TOKENS))
    return encoder, ModelRunner(cast(Adapter, encoder), random_models.MAX_BATCH_TOKENS)


def build_app(folder: Path) -> Any:
    from bench.packed_ab import FORWARD, GROUP

    encoder, runner = load(folder)
    device = ThreadPoolExecutor(1, thread_name_prefix="lean-device")

    async def app(scope: Message, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] == "GET":
            await _answer(send, 200, b"{}", b"application/json")
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        texts = [item["text"] for item in msgpack.unpackb(b"".join(chunks))["items"]]
        prepared = encoder.prepare(texts, FORWARD)
        order = sorted(range(len(prepared)), key=lambda i: prepared[i].cost)  # the runner's order
        batch = [prepared[i] for i in order]
        loop = asyncio.get_running_loop()
        outputs, _, _ = await loop.run_in_executor(device, runner.run, batch, [GROUP] * len(batch))
        vectors: list[bytes] = [b""] * len(outputs)
        for i, output in zip(order, outputs, strict=True):
            vectors[i] = np.asarray(output.dense).tobytes()
        items = [{"dense": {"dtype": "float32", "values": vector}} for vector in vectors]
        await _answer(send, 200, msgpack.packb({"items": items}), b"application/msgpack")

    return app


async def _answer(send: Any, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]}
    )
    await send({"type": "http.response.body", "body": body})


def main(argv: list[str]) -> None:
    import uvicorn

    folder, port = Path(argv[0]), int(argv[1])
    uvicorn.run(build_app(folder), host="127.0.0.1", port=port, log_config=None, access_log=False)


if __name__ == "__main__":
    main(sys.argv[1:])
