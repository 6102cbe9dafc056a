"""The chart renders the queue variables where the public chart does (``queueRouting`` on the
workers), plus what ours reads beside them: the gateways' stream age, backlog bound and health mode,
and each GPU pool's ``SIE_GPU_TYPE``; changed values reach the variables."""

from __future__ import annotations

from sie.settings.gateway import GatewaySettings, HealthMode
from sie.settings.server import Settings
from tests.deploy.chart import GPU_VALUES, env_of, one, render


def _env(objects: list[dict], kind: str, name: str) -> dict:
    return env_of(one(objects, kind, name)["spec"]["template"]["spec"]["containers"][0])


def test_workers_and_gateways_get_the_queue_variables_with_the_public_defaults() -> None:
    objects = render(values_file=GPU_VALUES)
    l4 = _env(objects, "StatefulSet", "sie-sie-cluster-worker-l4")
    a100 = _env(objects, "StatefulSet", "sie-sie-cluster-worker-a100-80gb")
    gateway = _env(objects, "Deployment", "sie-sie-cluster-gateway")
    queue = ("SIE_NAK_DELAY_S", "SIE_OOM_NAK_DELAY_S", "SIE_MAX_DELIVER", "SIE_STREAM_MAX_AGE_S")
    assert [l4[name] for name in queue] == ["5", "10", "20", "120"]
    assert (l4["SIE_GPU_TYPE"], a100["SIE_GPU_TYPE"]) == ("l4", "a100-80gb")
    assert (gateway["SIE_GATEWAY_HEALTH_MODE"], gateway["SIE_GATEWAY_MAX_STREAM_PENDING"]) == (
        "nats",
        "50000",
    )
    assert gateway["SIE_STREAM_MAX_AGE_S"] == l4["SIE_STREAM_MAX_AGE_S"]  # one stream config on both sides
    # What the chart renders is what the processes read: their settings parse it to the values meant.
    worker = Settings(
        **{k.removeprefix("SIE_").lower(): v for k, v in l4.items() if k in queue or k == "SIE_GPU_TYPE"}
    )
    assert (worker.nak_delay_s, worker.oom_nak_delay_s, worker.max_deliver, worker.stream_max_age_s) == (
        5,
        10,
        20,
        120,
    )
    assert worker.gpu_type_override() == "l4"
    read = GatewaySettings(
        nats_url="nats://x:4222",
        gateway_health_mode=gateway["SIE_GATEWAY_HEALTH_MODE"],
        gateway_max_stream_pending=gateway["SIE_GATEWAY_MAX_STREAM_PENDING"],
    )
    assert (read.gateway_health_mode, read.gateway_max_stream_pending) == (HealthMode.NATS, 50_000)


def test_changed_values_reach_the_variables_and_the_cpu_pool_reports_no_gpu_type() -> None:
    values = {
        "queueRouting": {"nakDelaySec": 2, "oomNakDelaySec": 30, "maxDeliver": 5, "streamMaxAgeSec": 90},
        "gateway": {"maxStreamPending": 1000},
    }
    objects = render(values)
    cpu = _env(objects, "StatefulSet", "sie-sie-cluster-worker-cpu")
    gateway = _env(objects, "Deployment", "sie-sie-cluster-gateway")
    assert [
        cpu[n] for n in ("SIE_NAK_DELAY_S", "SIE_OOM_NAK_DELAY_S", "SIE_MAX_DELIVER", "SIE_STREAM_MAX_AGE_S")
    ] == [
        "2",
        "30",
        "5",
        "90",
    ]
    assert (gateway["SIE_GATEWAY_MAX_STREAM_PENDING"], gateway["SIE_STREAM_MAX_AGE_S"]) == ("1000", "90")
    assert "SIE_GPU_TYPE" not in cpu
