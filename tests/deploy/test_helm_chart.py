"""deploy/helm/sie-cluster rendered with Helm's own library for the default and the GPU production
values: every core object valid against the Kubernetes OpenAPI schemas (kubernetes-validate, strict:
unknown fields are errors), and the wiring between the parts as the code reads it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import nats
import pytest
import yaml

from sie.queue.roles import ROLES
from tests.conftest import _free_nats_port, nats_binary
from tests.deploy.chart import CHART, GPU_VALUES, NAMESPACE, env_of, one, render

# Custom resources whose schemas ship with their operators (KEDA, Prometheus Operator), not with
# Kubernetes: checked field by field below.
CUSTOM = {"ScaledObject", "ServiceMonitor", "PrometheusRule"}


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return render()


@pytest.fixture(scope="module")
def gpu() -> list[dict[str, Any]]:
    return render(values_file=GPU_VALUES)


def validate(objects: list[dict[str, Any]]) -> list[str]:
    checked = []
    for obj in objects:
        if obj["kind"] in CUSTOM:
            continue
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
        checked.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return checked


def test_the_default_values_render_schema_valid_objects(default: list[dict[str, Any]]) -> None:
    checked = validate(default)
    assert {c.split("/")[0] for c in checked} == {
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "Service",
        "StatefulSet",
        "Secret",
        "PodDisruptionBudget",
    }
    assert (
        "StatefulSet/sie-sie-cluster-worker-cpu" in checked and "StatefulSet/sie-sie-cluster-nats" in checked
    )
    assert not [o for o in default if o["kind"] in CUSTOM]  # autoscaling and monitoring are opt-in


def test_the_gpu_values_render_schema_valid_objects(gpu: list[dict[str, Any]]) -> None:
    checked = validate(gpu)
    assert {"StatefulSet/sie-sie-cluster-worker-l4", "StatefulSet/sie-sie-cluster-worker-a100-80gb"} <= set(
        checked
    )
    assert "PersistentVolumeClaim/sie-sie-cluster-config-store" in checked
    kinds = sorted(o["kind"] for o in gpu if o["kind"] in CUSTOM)
    assert kinds == [
        "PrometheusRule",
        "ScaledObject",
        "ScaledObject",
        "ScaledObject",
        "ServiceMonitor",
        "ServiceMonitor",
    ]


def test_strict_validation_refuses_an_unknown_field(default: list[dict[str, Any]]) -> None:
    """The validator itself can fail: a typo'd field in a rendered object is an error."""
    service = dict(one(default, "Service", "sie-sie-cluster-gateway"))
    service["spec"] = {**service["spec"], "portz": []}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, kubernetes_validate.latest_version(), strict=True)


def test_workers_get_the_env_the_worker_reads_and_probes_on_its_probe_port(gpu: list[dict[str, Any]]) -> None:
    worker = one(gpu, "StatefulSet", "sie-sie-cluster-worker-l4")
    pod = worker["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = env_of(container)
    assert env["SIE_NATS_URL"] == "nats://sie-sie-cluster-nats:4222"
    assert (env["SIE_POOL"], env["SIE_MACHINE_PROFILE"], env["SIE_BUNDLE"], env["SIE_DEVICE"]) == (
        "l4",
        "l4",
        "default",
        "cuda",
    )
    assert env["SIE_WORKER_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SIE_CONFIG_SERVICE_URL"] == f"http://sie-sie-cluster-config.{NAMESPACE}.svc:8080"
    assert env["SIE_GATEWAY_URL"] == f"http://sie-sie-cluster-gateway.{NAMESPACE}.svc:8080"
    # seed 001's batching values reach the variables the queue worker reads
    assert (
        env["SIE_BATCHER_COALESCE_MS"],
        env["SIE_BATCHER_MAX_BATCH_REQUESTS"],
        env["SIE_RUST_PIPELINE_DEPTH"],
    ) == ("5", "12", "2")
    assert (
        env["SIE_ADAPTIVE_MIN_QUANTUM_MS"],
        env["SIE_ADAPTIVE_MAX_QUANTUM_MS"],
        env["SIE_ADAPTIVE_TARGET_P50_MS"],
    ) == ("2", "15", "50")
    assert (
        env["SIE_PAYLOAD_STORE_URL"] == "s3://sie-payloads/queue"
        and env["SIE_CLUSTER_CACHE"] == "s3://sie-models/hub"
    )
    assert env["SIE_PRELOAD_MODELS"] == "BAAI/bge-m3"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(env["SIE_WORKER_METRICS_PORT"]) == ports["probes"] == 9095
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "probes"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["image"].endswith("/sie-server-cuda:0.10.0")
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    # Above the drain: 30 s of items in flight plus SIE_DRAIN_TIMEOUT_S.
    assert pod["terminationGracePeriodSeconds"] > 30 + int(env["SIE_DRAIN_TIMEOUT_S"])
    assert worker["spec"]["replicas"] == 0  # scaled from zero by KEDA


def test_config_deltas_are_trusted_and_the_gateway_routes_the_enabled_profiles(
    gpu: list[dict[str, Any]],
) -> None:
    config = one(gpu, "Deployment", "sie-sie-cluster-config")
    gateway = one(gpu, "Deployment", "sie-sie-cluster-gateway")
    worker = one(gpu, "StatefulSet", "sie-sie-cluster-worker-l4")
    config_env = env_of(config["spec"]["template"]["spec"]["containers"][0])
    assert config_env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert (
        config_env["SIE_CONFIG_STORE_DIR"] == "/var/lib/sie-config"
        and config_env["SIE_CONFIG_RESTORE"] == "true"
    )
    assert config["spec"]["replicas"] == 1 and config["spec"]["strategy"] == {"type": "Recreate"}
    # sie-config's pods are named <deployment>-<hash>-<id>: a follower trusting the deployment's name
    # (an entry trusts `entry-...`) applies their deltas, where the public chart's default would not.
    for follower in (gateway["spec"]["template"]["spec"], worker["spec"]["template"]["spec"]):
        env = env_of(follower["containers"][0])
        assert env["SIE_NATS_CONFIG_TRUSTED_PRODUCERS"] == config["metadata"]["name"]
    gateway_env = env_of(gateway["spec"]["template"]["spec"]["containers"][0])
    assert gateway_env["SIE_GATEWAY_CONFIGURED_GPUS"] == "a100-80gb,l4"
    assert gateway_env["SIE_AUTH_MODE"] == "token"
    assert gateway_env["SIE_AUTH_TOKEN"] == {
        "secretKeyRef": {"name": "sie-auth", "key": "auth-token", "optional": True}
    }
    gateway_container = gateway["spec"]["template"]["spec"]["containers"][0]
    assert gateway_container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    pdb = one(gpu, "PodDisruptionBudget", "sie-sie-cluster-gateway")
    assert pdb["spec"]["selector"]["matchLabels"] == gateway["spec"]["selector"]["matchLabels"]


def test_keda_scales_each_pool_on_the_gateways_metrics(gpu: list[dict[str, Any]]) -> None:
    scaled = one(gpu, "ScaledObject", "sie-sie-cluster-worker-l4")
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "sie-sie-cluster-worker-l4",
    }
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["cooldownPeriod"]) == (0, 10, 900)
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 300
    triggers = {t["name"]: t["metadata"] for t in spec["triggers"]}
    lane = 'machine_profile="l4",bundle="default"'
    assert triggers["pending-demand"]["query"] == f"sum(sie_gateway_pending_demand{{{lane}}}) or vector(0)"
    assert triggers["queue-depth"]["query"] == f"sum(sie_gateway_worker_queue_depth{{{lane}}}) or vector(0)"
    assert triggers["leased-gpus"]["query"] == f"sum(sie_gateway_active_lease_gpus{{{lane}}}) or vector(0)"
    assert (triggers["pending-demand"]["threshold"], triggers["pending-demand"]["activationThreshold"]) == (
        "1",
        "0",
    )
    assert (triggers["queue-depth"]["threshold"], triggers["queue-depth"]["activationThreshold"]) == (
        "10",
        "2",
    )
    assert all(t["type"] == "prometheus" for t in spec["triggers"])
    monitors = {o["metadata"]["name"]: o for o in gpu if o["kind"] == "ServiceMonitor"}
    services = [o for o in gpu if o["kind"] == "Service"]
    for monitor in monitors.values():
        port = monitor["spec"]["endpoints"][0]["port"]
        selected = [s for s in services if s["metadata"]["labels"].get("sie.engine/metrics-port") == port]
        assert selected and all(port in {p["name"] for p in s["spec"]["ports"]} for s in selected)
    rule = one(gpu, "PrometheusRule", "sie-sie-cluster")
    assert {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]} >= {
        "SIEWorkerDown",
        "SIEConfigEpochLag",
    }


def test_nats_clusters_from_three_replicas_or_is_an_existing_url() -> None:
    single = one(render(), "StatefulSet", "sie-sie-cluster-nats")
    assert not any(
        a.startswith("--routes") for a in single["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    clustered = one(render({"nats": {"replicas": 3}}), "StatefulSet", "sie-sie-cluster-nats")
    args = clustered["spec"]["template"]["spec"]["containers"][0]["args"]
    routes = next(a for a in args if a.startswith("--routes="))
    assert (
        routes.count("nats://") == 3 and "sie-sie-cluster-nats-2.sie-sie-cluster-nats-headless:6222" in routes
    )
    external = render({"nats": {"install": False, "url": "nats://nats.infra:4222"}})
    assert not [o for o in external if o["metadata"]["name"].startswith("sie-sie-cluster-nats")]
    worker = one(external, "StatefulSet", "sie-sie-cluster-worker-cpu")
    assert (
        env_of(worker["spec"]["template"]["spec"]["containers"][0])["SIE_NATS_URL"]
        == "nats://nats.infra:4222"
    )
    with pytest.raises(helm_python.HelmRenderError, match=r"nats\.url is required"):
        render({"nats": {"install": False}})


def test_only_queue_routing_renders() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="clusterRouting must be queue"):
        render({"clusterRouting": "ws"})


def leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Every value a user can set; a pool's keys once, as ``workers.pools.<name>.*``, and maps of
    Kubernetes fields (resources, node selectors, labels) as one value."""
    paths = []
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        if path == "workers.pools":
            pools: list[dict[str, Any]] = list(value.values())
            paths += [f"{path}.<name>.{k}" for k in sorted({k for p in pools for k in p})]
        elif isinstance(value, dict) and value and key not in {"resources", "nodeSelector", "labels"}:
            paths += leaf_paths(value, path)
        else:
            paths.append(path)
    return paths


def test_every_value_is_documented_in_the_charts_readme() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    undocumented = [p for p in leaf_paths(values) if f"| `{p}` |" not in readme]
    assert not undocumented


def _nats_users(conf: str) -> dict[str, tuple[list[str], list[str]]]:
    """user -> (publish allow, subscribe allow), read off the chart's nats.conf."""
    users = {}
    for block in re.findall(r"user: (\S+)\n.*?subscribe: \{allow: (\[.*?\])\}", conf, re.S):
        name, subscribe = block
        publish = re.search(rf"user: {re.escape(name)}\n.*?publish: \{{allow: (\[.*?\])\}}", conf, re.S)
        assert publish is not None
        users[name] = (json.loads(publish[1]), json.loads(subscribe))
    return users


def test_the_charts_nats_users_have_the_roles_permissions(default: list[dict[str, Any]]) -> None:
    """The chart's NATS config is the table of sie.queue.roles, role for role and subject for subject;
    each process gets its role's user and the password from the chart's Secret."""
    conf = one(default, "ConfigMap", "sie-sie-cluster-nats-config")["data"]["nats.conf"]
    expected = {f"sie-{role}": (list(r.publish), list(r.subscribe)) for role, r in ROLES.items()}
    assert _nats_users(conf) == expected
    nats_pod = one(default, "StatefulSet", "sie-sie-cluster-nats")["spec"]["template"]["spec"]
    assert "--config=/etc/nats/nats.conf" in nats_pod["containers"][0]["args"]
    secret = one(default, "Secret", "sie-sie-cluster-nats-auth")
    assert sorted(secret["data"]) == ["config", "gateway", "route", "worker"]  # route: between NATS nodes
    assert len({base64.b64decode(v) for v in secret["data"].values()}) == 4  # one password each
    for kind, name, role in (
        ("Deployment", "sie-sie-cluster-gateway", "gateway"),
        ("StatefulSet", "sie-sie-cluster-worker-cpu", "worker"),
        ("Deployment", "sie-sie-cluster-config", "config"),
    ):
        env = env_of(one(default, kind, name)["spec"]["template"]["spec"]["containers"][0])
        assert env["SIE_NATS_USER"] == f"sie-{role}"
        assert env["SIE_NATS_PASSWORD"] == {
            "secretKeyRef": {"name": "sie-sie-cluster-nats-auth", "key": role}
        }


def test_the_charts_nats_config_runs_and_refuses_anonymous_clients(
    default: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The rendered nats.conf as the pod runs it: a real nats-server with the passwords in its
    environment; each role's user connects, a client without credentials is refused."""
    conf = tmp_path / "nats.conf"
    conf.write_text(one(default, "ConfigMap", "sie-sie-cluster-nats-config")["data"]["nats.conf"])
    passwords = {role: f"pw-{role}" for role in ROLES}
    env = {**os.environ, **{f"SIE_NATS_{role.upper()}_PASSWORD": pw for role, pw in passwords.items()}}
    port = _free_nats_port()
    argv = [nats_binary(), "--config", str(conf), "--jetstream", "--store_dir", str(tmp_path / "js")]
    process = subprocess.Popen([*argv, "-a", "127.0.0.1", "-p", str(port)], env=env)
    url = f"nats://127.0.0.1:{port}"

    async def check() -> None:
        for _ in range(100):
            try:
                client = await nats.connect(
                    url, user="sie-worker", password="pw-worker", allow_reconnect=False
                )
                break
            except (OSError, nats.errors.Error):
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("nats-server did not start with the chart's config")
        await client.close()
        for role, password in passwords.items():
            client = await nats.connect(url, user=f"sie-{role}", password=password, allow_reconnect=False)
            await client.close()
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(url, allow_reconnect=False)

    try:
        asyncio.run(check())
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_network_policies_close_nats_the_workers_and_sie_config(default: list[dict[str, Any]]) -> None:
    policies = {o["metadata"]["name"]: o["spec"] for o in default if o["kind"] == "NetworkPolicy"}
    assert sorted(policies) == ["sie-sie-cluster-config", "sie-sie-cluster-nats", "sie-sie-cluster-workers"]
    clients = policies["sie-sie-cluster-nats"]["ingress"][0]
    assert clients["ports"] == [{"port": 4222, "protocol": "TCP"}]
    components = [
        p["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component") for p in clients["from"]
    ]
    assert components == ["gateway", None, "config"]  # None: the workers, by their pool label
    assert clients["from"][1]["podSelector"]["matchExpressions"] == [
        {"key": "sie.engine/pool", "operator": "Exists"}
    ]
    assert policies["sie-sie-cluster-workers"]["ingress"] == [{"ports": [{"port": 9095, "protocol": "TCP"}]}]
    worker_service = one(default, "Service", "sie-sie-cluster-worker-cpu")
    assert [p["name"] for p in worker_service["spec"]["ports"]] == ["probes"]
    extra = {"namespaceSelector": {"matchLabels": {"team": "search-admin"}}}
    opened = render({"networkPolicy": {"configFrom": [extra]}})
    config_from = one(opened, "NetworkPolicy", "sie-sie-cluster-config")["spec"]["ingress"][0]["from"]
    assert config_from[-1] == extra
    assert not [o for o in render({"networkPolicy": {"enabled": False}}) if o["kind"] == "NetworkPolicy"]
    plain = render({"nats": {"auth": {"enabled": False}}})
    assert not [o for o in plain if o["kind"] == "ConfigMap"]
    assert "SIE_NATS_USER" not in env_of(
        one(plain, "Deployment", "sie-sie-cluster-gateway")["spec"]["template"]["spec"]["containers"][0]
    )
