"""``python -m bench.item_cap``: what a million-item request costs the server and the gateway, over
real HTTP (docs/security.md): the refusal's round trip beside the baseline of a one-item request in
the same run, and the process's RSS before and after (from /proc).

The server runs MiniLM (``sie-server serve``); the gateway runs on a throwaway ``nats-server`` with
no worker, so its baseline is the one-item request's provisioning answer (admission, routing, no
model). Each request is sent ``--rounds`` times; the medians are printed with their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import msgspec

from bench import procs
from bench.servers import offline_env, start_sie

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ROUTE = f"/v1/encode/{MODEL}"
ONE = msgspec.json.encode({"items": [{"text": "one"}]})


def _median_ms(client: httpx.Client, body: bytes, content_type: str, rounds: int, status: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.post(ROUTE, content=body, headers={"content-type": content_type})
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == status, (response.status_code, response.text[:300])
    return statistics.median(times)


def measure(url: str, pid: int, name: str, rounds: int, baseline_status: int) -> None:
    million = {
        "json": (msgspec.json.encode({"items": [{"text": "a"}] * 1_000_000}), "application/json"),
        "msgpack": (msgspec.msgpack.encode({"items": [{"text": "a"}] * 1_000_000}), "application/msgpack"),
    }
    with httpx.Client(base_url=url, timeout=120) as client:
        baseline = _median_ms(client, ONE, "application/json", rounds, baseline_status)
        rss_before = procs.rss_mb(pid)
        for kind, (body, content_type) in million.items():
            refused = _median_ms(client, body, content_type, rounds, 400)
            print(
                f"{name:8} 1,000,000 items ({kind:7}, {len(body) / 1e6:5.1f} MB): refused in {refused:6.1f} ms "
                f"(one-item baseline {baseline:5.1f} ms, ratio {refused / baseline:5.1f}x)"
            )
        print(f"{name:8} RSS {rss_before:.0f} MB before the refusals, {procs.rss_mb(pid):.0f} MB after")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bench-item-cap-"))
    try:
        server = start_sie(MODEL, "float32", {}, folder)
        measure(server.base_url, server.pid, "server", args.rounds, 200)
        server.stop()
        nats_port, gateway_port = procs.free_port(), procs.free_port()
        nats_bin = str(Path(sys.executable).with_name("nats-server"))
        nats = procs.ManagedProcess(
            "nats-server",
            [nats_bin, "-a", "127.0.0.1", "-p", str(nats_port), "-js", "-sd", str(folder / "js")],
            {},
            folder / "nats.log",
        )
        nats.start()
        env = offline_env({"SIE_NATS_URL": f"nats://127.0.0.1:{nats_port}"})
        argv = [
            str(Path(sys.executable).with_name("sie-gateway")),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(gateway_port),
        ]
        gateway = procs.ManagedProcess("sie-gateway", argv, env, folder / "gateway.log")
        gateway.start()
        url = f"http://127.0.0.1:{gateway_port}"
        procs.wait_ready(gateway, lambda c: c.get(f"{url}/readyz").status_code == 200, 60)
        measure(url, gateway.pid, "gateway", args.rounds, 202)
        gateway.stop()
        nats.stop()
    finally:
        procs.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
