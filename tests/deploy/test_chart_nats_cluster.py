"""The chart's NATS as a cluster: at three replicas the nodes route to each other with a password
(a pod that reaches port 6222 cannot join as a node), the gateways and workers keep their streams
and bucket in three copies, and a single node keeps one; an external NATS cluster sets the copies."""

from __future__ import annotations

from typing import Any

from sie.settings.server import Settings
from tests.deploy.chart import env_of, one, render


def _container(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    container: dict[str, Any] = one(objects, kind, name)["spec"]["template"]["spec"]["containers"][0]
    return container


def _replicas(objects: list[dict[str, Any]]) -> tuple[str, str]:
    gateway = env_of(_container(objects, "Deployment", "sie-sie-cluster-gateway"))
    worker = env_of(_container(objects, "StatefulSet", "sie-sie-cluster-worker-cpu"))
    return gateway["SIE_STREAM_REPLICAS"], worker["SIE_STREAM_REPLICAS"]


def test_three_nats_replicas_route_with_a_password_and_keep_three_copies() -> None:
    objects = render({"nats": {"replicas": 3}})
    nats = _container(objects, "StatefulSet", "sie-sie-cluster-nats")
    args = nats["args"]
    login = "sie-route:$(SIE_NATS_ROUTE_PASSWORD)@"
    assert f"--cluster=nats://{login}0.0.0.0:6222" in args
    (routes,) = [a for a in args if a.startswith("--routes=")]
    peers = routes.removeprefix("--routes=").split(",")
    assert peers == [
        f"nats://{login}sie-sie-cluster-nats-{i}.sie-sie-cluster-nats-headless:6222" for i in range(3)
    ]
    # The password comes from the generated Secret, whose keys now include the routes'.
    (route_env,) = [e for e in nats["env"] if e["name"] == "SIE_NATS_ROUTE_PASSWORD"]
    assert route_env["valueFrom"]["secretKeyRef"]["key"] == "route"
    secret = one(objects, "Secret", "sie-sie-cluster-nats-auth")
    assert set(secret["data"]) == {"gateway", "worker", "config", "route"}
    assert _replicas(objects) == ("3", "3")
    assert Settings(stream_replicas=_replicas(objects)[1]).stream_replicas == 3


def test_one_nats_node_keeps_one_copy_and_an_external_cluster_sets_its_own() -> None:
    single = render()
    nats = _container(single, "StatefulSet", "sie-sie-cluster-nats")
    assert not any(a.startswith(("--cluster", "--routes")) for a in nats["args"])
    assert _replicas(single) == ("1", "1")
    external = render(
        {"nats": {"install": False, "url": "nats://nats.example:4222"}, "queueRouting": {"streamReplicas": 5}}
    )
    assert _replicas(external) == ("5", "5")
