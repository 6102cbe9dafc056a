"""Scale from zero, pools with leases and auth on a real gateway over a real ``nats-server``.

No worker: the gateway answers 202 ``provisioning`` with ``Retry-After`` (503 ``PROVISIONING`` to
sie-sdk 0.7 and later), raises ``sie_gateway_pending_demand`` for the autoscaler, and our SDK's
``wait_for_capacity`` returns once a worker starts; the gauge falls again. Pools are leases; a worker
of a named pool pulls only while its pool is leased. Auth: ``none`` and ``token`` modes, the admin
token for mutations, probes always open.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sie.sdk import SIEClient
from tests.conftest import NatsServer, running_nats
from tests.e2e.cluster import run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM

ENCODE = f"/v1/encode/{MINILM}"
BODY = {"items": [{"text": "scale me up"}]}


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    with running_nats(tmp_path) as server:
        yield server


def _gateway_env(nats: NatsServer, **extra: str) -> dict[str, str]:
    return {"SIE_NATS_URL": nats.url, "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500", **extra}


def test_scale_from_zero(nats: NatsServer, tmp_path: Path) -> None:
    with run_gateway(tmp_path / "gateway", _gateway_env(nats)) as gateway:
        refused = gateway.client.post(ENCODE, json=BODY)
        assert refused.status_code == 202
        assert refused.headers["retry-after"] == "120"
        assert refused.json()["status"] == "provisioning"
        assert gateway.metric("sie_gateway_pending_demand", bundle="default") == 1
        # sie-sdk 0.7 and later read scale from zero as 503 PROVISIONING.
        modern = gateway.client.post(ENCODE, json=BODY, headers={"X-SIE-SDK-Version": "0.10.1"})
        assert (modern.status_code, modern.headers["x-sie-error-code"]) == (503, "PROVISIONING")
        assert modern.json()["detail"]["code"] == "PROVISIONING" and modern.headers["retry-after"] == "120"

        capacity: dict[str, object] = {}

        def wait() -> None:
            with SIEClient(gateway.url, timeout_s=30) as client:
                capacity.update(client.wait_for_capacity(timeout_s=120, poll_interval_s=0.2))

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(1)
        assert waiter.is_alive()  # nothing to wait for yet
        with run_worker(tmp_path / "w1", worker_env(nats.url, "w1")):
            waiter.join(timeout=120)
            assert not waiter.is_alive() and capacity["worker_count"] == 1
            with SIEClient(gateway.url, timeout_s=30) as client:
                result = client.encode(MINILM, {"text": "scale me up"}, wait_for_capacity=True)
            assert result["dense"].shape == (384,)
            assert gateway.metric("sie_gateway_pending_demand", bundle="default") == 0
        assert gateway.metric("sie_gateway_provisioning_responses_total") == 2


def test_the_sdk_waits_through_provisioning_until_a_worker_answers(nats: NatsServer, tmp_path: Path) -> None:
    """``wait_for_capacity=True`` (the default) on encode rides out 202s while a worker starts."""
    with run_gateway(tmp_path / "gateway", _gateway_env(nats)) as gateway:
        results: list[object] = []

        def call() -> None:
            with SIEClient(gateway.url, timeout_s=30) as client:
                # Poll every half second, not after the gateway's Retry-After of 120 s (which the SDK
                # honours unjittered): the test waits for the worker, not for the header.
                client._sleep = lambda s: time.sleep(min(s, 0.5))
                results.append(client.encode(MINILM, {"text": "cold start"}, provision_timeout_s=120))

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(1)
        with run_worker(tmp_path / "w1", worker_env(nats.url, "w1")):
            caller.join(timeout=120)
        assert len(results) == 1


def test_pools_lease_expiry_and_admission(nats: NatsServer, tmp_path: Path) -> None:
    with run_gateway(tmp_path / "gateway", _gateway_env(nats)) as gateway:
        pools = gateway.client
        assert pools.post("/v1/pools", json={"name": "Bad Name!"}).status_code == 400
        assert pools.delete("/v1/pools/default").status_code == 403
        assert pools.get("/v1/pools/nope").status_code == 404
        env = worker_env(nats.url, "eval-1", SIE_POOL="eval", SIE_GATEWAY_URL=gateway.url)
        with run_worker(tmp_path / "w1", env):
            # Unleased, the worker pulls nothing and says it is not ready: the pool's requests wait.
            assert pools.post(ENCODE, json=BODY, headers={"X-SIE-Pool": "eval"}).status_code == 202
            spec = {"name": "eval", "gpus": {"default": 1}, "ttl_seconds": 6, "queue_pool": "eval"}
            created = pools.post("/v1/pools", json=spec)
            assert created.status_code == 201, created.text
            assert created.json()["status"]["state"] == "pending"
            deadline = time.monotonic() + 60
            while pools.get("/v1/pools/eval").json()["status"]["state"] != "active":
                assert time.monotonic() < deadline
                assert pools.post("/v1/pools/eval/renew").status_code == 200
                time.sleep(0.2)
            view = pools.get("/v1/pools/eval").json()
            assert [w["name"] for w in view["status"]["assigned_workers"]] == ["eval-1"]
            routed = pools.post(ENCODE, json=BODY, headers={"X-SIE-MACHINE-PROFILE": "eval/default"})
            assert routed.status_code == 200, routed.text
            assert routed.headers["x-sie-worker"] == "eval-1"
            assert gateway.metric("sie_gateway_active_lease_gpus", machine_profile="default") == 1
            # Not renewed: the lease lapses, the sweep deletes it, the worker stops pulling.
            deadline = time.monotonic() + 30
            while pools.get("/v1/pools/eval").status_code != 404:
                assert time.monotonic() < deadline, pools.get("/v1/pools/eval").text
                time.sleep(0.2)
            deadline = time.monotonic() + 30  # the worker hears it at its next poll and says not ready
            while any(w["healthy"] for w in gateway.health()["workers"] if w["name"] == "eval-1"):
                assert time.monotonic() < deadline, "the unleased worker still says it is ready"
                time.sleep(0.2)
            assert pools.post(ENCODE, json=BODY, headers={"X-SIE-Pool": "eval"}).status_code == 202
            assert gateway.metric("sie_gateway_pool_events_total", event="expired") == 1
            # Leased again (through the SDK, which renews in the background): it pulls again.
            with SIEClient(gateway.url, timeout_s=30) as client:
                client.lease_renewal_s = 1
                client.create_pool("eval", {"default": 1}, queue_pool="eval")
                assert client.get_pool("eval")["spec"]["queue_pool"] == "eval"
                time.sleep(8)  # past the first lease's 6 s: alive only because it is renewed
                renewed = client.get_pool("eval")["status"]["last_renewed"]
                assert time.time() - renewed < 3
                result = client.encode(
                    MINILM, {"text": "leased again"}, gpu="eval/default", provision_timeout_s=60
                )
                assert result["dense"].shape == (384,)
                assert client.delete_pool("eval") is True
                assert client.get_pool("eval") is None and client.delete_pool("eval") is False


@pytest.mark.parametrize("mode", ["token", "static"])
def test_auth_matrix(nats: NatsServer, tmp_path: Path, mode: str) -> None:
    env = _gateway_env(nats, SIE_AUTH_MODE=mode, SIE_AUTH_TOKENS="alpha,beta", SIE_ADMIN_TOKEN="root")
    with run_gateway(tmp_path / "gateway", env) as gateway:
        client = httpx.Client(base_url=gateway.url, timeout=30)

        def status(
            method: str, path: str, token: str | None, **kwargs: object
        ) -> tuple[int, dict[str, object]]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            response = client.request(method, path, headers=headers, **kwargs)  # type: ignore[arg-type]
            return response.status_code, (response.json() if response.content else {})

        for probe in ("/healthz", "/readyz"):
            assert status("GET", probe, None)[0] == 200
        code, body = status("POST", ENCODE, None, json=BODY)
        assert code == 401 and body["detail"] == {
            "code": "UNAUTHORIZED",
            "message": "Missing Authorization header",
        }
        code, body = status("POST", ENCODE, "gamma", json=BODY)
        assert code == 401 and body["message"] == "Invalid token"
        assert status("POST", ENCODE, "beta", json=BODY)[0] == 202  # past auth: no worker yet
        assert client.post(ENCODE, json=BODY, headers={"Authorization": "alpha"}).status_code == 202  # bare
        assert status("GET", "/health", None)[0] == 401
        assert status("GET", "/v1/pools", "alpha")[0] == 200
        code, body = status("POST", "/v1/pools", "alpha", json={"name": "p1"})
        assert code == 403 and body["detail"]["message"] == "Admin token required"
        assert status("POST", "/v1/pools", "root", json={"name": "p1"})[0] == 201
        assert status("POST", "/v1/pools/p1/renew", "alpha")[0] == 403
        assert status("DELETE", "/v1/pools/p1", "root")[0] == 200
        client.close()


def test_operational_routes_exempt_and_auth_mode_none(nats: NatsServer, tmp_path: Path) -> None:
    """Once, not per mode of ``test_auth_matrix``: probes and metrics open with
    ``SIE_AUTH_EXEMPT_OPERATIONAL``, mutations refused without an admin token, and mode ``none``."""
    open_env = _gateway_env(
        nats, SIE_AUTH_MODE="token", SIE_AUTH_TOKEN="solo", SIE_AUTH_EXEMPT_OPERATIONAL="true"
    )
    with run_gateway(tmp_path / "gateway-open", open_env) as gateway:
        assert (
            gateway.client.get("/health").status_code == 200
            and gateway.client.get("/metrics").status_code == 200
        )
        assert gateway.client.post(ENCODE, json=BODY).status_code == 401
        code = gateway.client.post(
            "/v1/pools", json={"name": "p2"}, headers={"Authorization": "Bearer solo"}
        ).status_code
        assert code == 403  # no admin token configured: mutations refused
    with run_gateway(tmp_path / "gateway-none", _gateway_env(nats)) as gateway:
        assert gateway.client.post(ENCODE, json=BODY).status_code == 202  # mode none: nothing asked
        assert gateway.client.post("/v1/pools", json={"name": "p3"}).status_code == 201


def test_several_gateways_share_workers_and_pools(nats: NatsServer, tmp_path: Path) -> None:
    """Gateways keep no state of their own: both route to the same worker (its heartbeats reach
    every gateway) and see the same pools (a JetStream key-value bucket)."""
    env = _gateway_env(nats)
    with (
        run_gateway(tmp_path / "g1", env) as first,
        run_gateway(tmp_path / "g2", env) as second,
        run_worker(tmp_path / "w1", worker_env(nats.url, "w1")),
    ):
        for gateway in (first, second):
            gateway.wait_for_workers(1, [MINILM])
            response = gateway.client.post(ENCODE, json=BODY, headers={"accept": "application/json"})
            assert response.status_code == 200 and response.headers["x-sie-worker"] == "w1"
        assert (
            first.client.post("/v1/pools", json={"name": "shared", "gpus": {"default": 1}}).status_code == 201
        )
        view = second.client.get("/v1/pools/shared").json()
        assert view["spec"]["gpus"] == {"default": 1} and view["status"]["state"] == "active"
        assert second.client.delete("/v1/pools/shared").status_code == 200
        assert first.client.get("/v1/pools/shared").status_code == 404
