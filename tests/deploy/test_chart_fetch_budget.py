"""The public chart's ``queueRouting.natsFetchBudget`` and ``clusterRouting`` reach every worker as
``SIE_NATS_FETCH_BUDGET`` and ``SIE_CLUSTER_ROUTING`` (the public defaults, and a changed budget), and
the server reads them as meant."""

from __future__ import annotations

from sie.settings.server import Settings
from tests.deploy.chart import GPU_VALUES, env_of, one, render


def _worker_env(objects: list[dict], name: str) -> dict:
    return env_of(one(objects, "StatefulSet", name)["spec"]["template"]["spec"]["containers"][0])


def test_every_worker_gets_the_fetch_budget_and_queue_routing() -> None:
    objects = render(values_file=GPU_VALUES)
    for pool in ("l4", "a100-80gb"):
        env = _worker_env(objects, f"sie-sie-cluster-worker-{pool}")
        assert (env["SIE_NATS_FETCH_BUDGET"], env["SIE_CLUSTER_ROUTING"]) == ("64", "queue")
    changed = _worker_env(render({"queueRouting": {"natsFetchBudget": 8}}), "sie-sie-cluster-worker-cpu")
    settings = Settings(
        nats_fetch_budget=changed["SIE_NATS_FETCH_BUDGET"],
        cluster_routing=changed["SIE_CLUSTER_ROUTING"],
        nats_url="nats://x:4222",
    )
    assert (settings.nats_fetch_budget, settings.queue_mode()) == (8, True)
