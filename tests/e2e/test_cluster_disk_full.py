"""A worker whose weight-cache disk is full, beside one with room (issue 38), with real processes:
``nats-server``, ``sie-gateway``, two ``sie-server`` workers, and a real tmpfs (``chaos.disk``) as the
first worker's ``SIE_LOCAL_CACHE``, too small for MiniLM's 91.6 MB. The model (MiniLM's YAML and
weights under an id no package ships) is in a folder cluster cache, so each worker copies it into its
own cache before loading it.

In order: with no worker able to load it, the client gets 502 ``MODEL_LOAD_FAILED`` (class
``STORAGE``) once the item's deliveries are spent, not a hang, while the full worker keeps serving
the model it has; with a second worker started, every request is answered by that one, correctly,
the full worker leaving each item it is offered to it; with the disk made larger, the full worker
loads the model as soon as an item reaches it and serves it. No partial copy is ever left on the
small disk, nothing is answered twice, nothing is left in the stream. Root only (mount): skipped
otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import filecmp
import os
import shutil
import time
from pathlib import Path

import httpx
import msgpack
import nats as nats_client
import pytest
from nats.aio.msg import Msg

from chaos.disk import full_disk
from tests.conftest import MODELS_DIR, running_nats
from tests.e2e.cluster import Gateway, run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM, MSGPACK_HEADERS, Server, cosine_of, unpack_body
from tests.e2e.test_cluster_faults import _assert_queue_empty

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
    pytest.mark.timeout(900),
]

MIB = 1024 * 1024
DISK_MODEL = "test/minilm-disk"
REVISION = "0123abcd"
SMALL_DISK = 40 * MIB  # MiniLM's files are 91.6 MB
ROOMY_DISK = 200 * MIB
COPIED = "models--test--minilm-disk/snapshots/" + REVISION


def models_folder(root: Path) -> Path:
    """The shipped MiniLM, and a copy of its YAML under ``DISK_MODEL``."""
    folder = root / "models"
    folder.mkdir()
    text = (MODELS_DIR / "sentence-transformers__all-MiniLM-L6-v2.yaml").read_text()
    (folder / "minilm.yaml").write_text(text)
    copy = text.replace(f"sie_id: {MINILM}", f"sie_id: {DISK_MODEL}").replace(
        f"hf_id: {MINILM}", f"hf_id: {DISK_MODEL}"
    )
    (folder / "minilm-disk.yaml").write_text(copy)
    return folder


def cluster_folder(root: Path, minilm_dir: Path) -> Path:
    """A folder cluster cache holding MiniLM's files as ``DISK_MODEL``'s snapshot."""
    snapshot = root / "cluster" / COPIED
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(minilm_dir, target_is_directory=True)
    return root / "cluster"


async def _encode_all(url: str, texts: list[str]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=180) as client:

        async def one(text: str) -> httpx.Response:
            body = msgpack.packb({"items": [{"text": text}]})
            return await client.post(f"/v1/encode/{DISK_MODEL}", content=body, headers=MSGPACK_HEADERS)

        return list(await asyncio.gather(*(one(t) for t in texts)))


async def _encode_counting_naks(
    nats_url: str, url: str, texts: list[str]
) -> tuple[list[httpx.Response], int]:
    """``_encode_all``, and how many NAKs JetStream announced meanwhile (its ``MSG_NAKED`` advisories):
    the items a worker turned away."""
    client = await nats_client.connect(nats_url)
    naks = 0

    async def counted(_: Msg) -> None:
        nonlocal naks
        naks += 1

    try:
        await client.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>", cb=counted)
        await client.flush()
        responses = await _encode_all(url, texts)
        await client.flush()
        return responses, naks
    finally:
        await client.close()


def assert_answered(responses: list[httpx.Response], texts: list[str], reference: Server) -> set[str]:
    """Every request 200 with MiniLM's own vector for its text; the workers that answered."""
    assert [r.status_code for r in responses] == [200] * len(texts), {
        r.status_code: r.text for r in responses if r.status_code != 200
    }
    for text, response, want in zip(texts, responses, reference.encode(texts), strict=True):
        (item,) = unpack_body(response.content)["items"]
        assert cosine_of(item["dense"]["values"], want) > 1 - 1e-5, text
    return {r.headers["x-sie-worker"] for r in responses}


def no_partial_copy(cache: Path) -> None:
    """No copy in progress left behind: a cluster copy's ``.<rev>.partial-<pid>`` folder, a Hub
    download's ``.sie-download-<pid>``."""
    partial = [*cache.glob("models--*/snapshots/.*"), *cache.glob(".*")]
    assert partial == [], partial


def test_a_full_weight_cache_leaves_the_model_to_the_worker_with_room_until_space_is_back(
    tmp_path: Path, minilm_dir: Path
) -> None:
    shared = {
        "SIE_MODELS_DIR": str(models_folder(tmp_path)),
        "SIE_CLUSTER_CACHE": str(cluster_folder(tmp_path, minilm_dir)),
        "SIE_HF_FALLBACK": "false",
    }
    with (
        running_nats(tmp_path) as nats,
        full_disk(tmp_path / "w1-cache", SMALL_DISK) as disk,
        contextlib.ExitStack() as stack,
    ):
        full = stack.enter_context(
            run_worker(
                tmp_path / "w1", {**worker_env(nats.url, "w1"), **shared, "SIE_LOCAL_CACHE": str(disk.folder)}
            )
        )
        gateway_env = {
            "SIE_NATS_URL": nats.url,
            "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
            "SIE_GATEWAY_REQUEST_TIMEOUT": "120",
            "SIE_MODELS_DIR": shared["SIE_MODELS_DIR"],
        }
        gateway: Gateway = stack.enter_context(run_gateway(tmp_path / "gateway", gateway_env))
        gateway.wait_for_workers(1, [MINILM])

        # 1. No worker can load it: a clear error once the item's deliveries are spent, not a hang.
        started = time.monotonic()
        refused = gateway.client.post(f"/v1/encode/{DISK_MODEL}", json={"items": [{"text": "no room"}]})
        took = time.monotonic() - started
        assert refused.status_code == 502, refused.text
        assert refused.json()["detail"] == {
            "code": "MODEL_LOAD_FAILED",
            "message": f"Model '{DISK_MODEL}' failed to load (STORAGE): the disk is full. "
            "The server's log has the detail.",
        }
        assert "retry-after" not in refused.headers
        # The load waits 5 s (SIE_NAK_DELAY_S), then 18 offers 1 s apart: never the 120 s timeout.
        assert 15 < took < 60, took
        usage = shutil.disk_usage(disk.folder)
        assert (
            f"loading {DISK_MODEL} failed (STORAGE, attempt 1, retry after 60 s): no room for {DISK_MODEL} "
            f"in the local weight cache {disk.folder}: it needs 91.6 MB, the disk mounted at {disk.folder} "
            f"has {usage.free / 1e6:.1f} MB free of {usage.total / 1e6:.1f} MB (no cached model could be "
            "evicted)"
        ) in full.log()
        assert list(disk.folder.iterdir()) == []  # refused before a byte was written
        # The full worker serves the model it has, directly and through the gateway.
        assert len(full.encode(["still serving"])) == 1
        served = gateway.client.post(f"/v1/encode/{MINILM}", json={"items": [{"text": "still serving"}]})
        assert served.status_code == 200 and served.headers["x-sie-worker"] == "w1", served.text

        # 2. A worker with room: every request answered by it, correctly; the full one passes each on.
        roomy = stack.enter_context(
            run_worker(
                tmp_path / "w2",
                {**worker_env(nats.url, "w2"), **shared, "SIE_LOCAL_CACHE": str(tmp_path / "w2-cache")},
            )
        )
        gateway.wait_for_workers(2, [MINILM])
        texts = [f"request {i}: a disk full of other models ({i * 7919 % 1000})" for i in range(40)]
        answered_by = assert_answered(asyncio.run(_encode_all(gateway.url, texts)), texts, roomy)
        assert answered_by == {"w2"}
        # w2 has the model loaded now: a NAK is the full worker's, an item it was offered and left.
        # Which worker's pull an item lands in is JetStream's choice (a burst may all go to w2, or
        # arrive while w1 holds back after a NAK), so load runs until w1 has been offered one.
        turned_away, offer = 0, 0
        while turned_away == 0:
            assert offer < 10, "the full worker was never offered an item of the model it cannot load"
            more = [f"steady load {offer}.{i}" for i in range(40)]
            responses, turned_away = asyncio.run(_encode_counting_naks(nats.url, gateway.url, more))
            assert assert_answered(responses, more, roomy) == {"w2"}
            offer += 1
        no_partial_copy(disk.folder)
        assert (tmp_path / "w2-cache" / COPIED / "model.safetensors").is_file()

        # 3. Room made: the full worker loads the model as soon as an item reaches it, and serves it.
        disk.resize(ROOMY_DISK)
        deadline = time.monotonic() + 240
        round_ = 0
        while "w1" not in answered_by:
            assert time.monotonic() < deadline, f"w1 never served {DISK_MODEL} again:\n{full.log()[-4000:]}"
            batch = [f"room again {round_}.{i}" for i in range(8)]
            answered_by = assert_answered(asyncio.run(_encode_all(gateway.url, batch)), batch, roomy)
            round_ += 1
        copied = disk.folder / COPIED
        no_partial_copy(disk.folder)
        kept = sorted(str(p.relative_to(copied)) for p in copied.rglob("*") if p.is_file())
        shipped = sorted(
            str(p.relative_to(minilm_dir))
            for p in minilm_dir.rglob("*")
            if p.is_file() and not p.name.startswith("README")  # no adapter reads it: not copied
        )
        assert kept == shipped
        assert all(filecmp.cmp(minilm_dir / name, copied / name, shallow=False) for name in kept)
        assert f"copied {len(kept)} files of {DISK_MODEL}" in full.log()

        # Nothing answered twice, nothing left in the stream.
        for reason in ("duplicate", "late"):
            assert gateway.metric("sie_gateway_queue_inbox_skips_total", reason=reason) == 0, reason
        _assert_queue_empty(nats.url)
