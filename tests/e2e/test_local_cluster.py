"""``sie-gateway local`` (what ``scripts/cluster`` runs): one command starts nats-server, sie-config, two workers
and the gateway; the SDK encodes through it; SIGTERM stops every process it started."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import nats
import numpy as np
import psutil
import pytest

from sie.sdk import SIEClient
from tests.e2e.cluster import _gateway_command
from tests.e2e.conftest import MINILM, Server, _free_port, cosine_of

API_CONFIG = """
sie_id: local/minilm
weights_path: {weights}
tasks: {{encode: {{dense: {{dim: 384}}}}}}
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie.adapters.dense_torch:TorchDenseEncoder"}}
"""


def test_one_command_runs_a_local_cluster_and_stops_it_whole(
    tmp_path: Path, server: Server, minilm_dir: Path
) -> None:
    port = _free_port()
    log = tmp_path / "local.log"
    argv = [*_gateway_command(), "local", "--workers", "2", "--port", str(port), "--preload", MINILM]
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "SIE_DEFAULT_COMPUTE_PRECISION": "float32"}
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, log.read_text()
            try:
                health = httpx.get(f"{url}/health", timeout=2).json()
                workers = [w for w in health["workers"] if MINILM in w["loaded_models"]]
                if len(workers) == 2:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        children = psutil.Process(process.pid).children(recursive=True)
        names = sorted(p.name() for p in children)
        assert names.count("nats-server") == 1 and len(children) >= 4, names
        # sie-config runs too: a model posted to it is served through the gateway, no restart.
        config_url = re.search(r"sie-config (http://\S+);", log.read_text())
        assert config_url is not None, log.read_text()
        # NATS runs with a user per role: a client without credentials is refused.
        nats_url = re.search(r"nats (nats://\S+);", log.read_text())
        assert nats_url is not None, log.read_text()
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            asyncio.run(nats.connect(nats_url[1], allow_reconnect=False, connect_timeout=5))
        added = httpx.post(
            f"{config_url[1]}/v1/configs/models", content=API_CONFIG.format(weights=minilm_dir)
        )
        assert added.status_code == 201, added.text
        deadline = time.monotonic() + 60
        while "local/minilm" not in {m["name"] for m in httpx.get(f"{url}/v1/models").json()["models"]}:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        with SIEClient(url, timeout_s=60) as client:
            result = client.encode(MINILM, [{"text": "one command"}, {"text": "a whole cluster"}])
        expected = server.encode(["one command", "a whole cluster"])
        for got, want in zip(result, expected, strict=True):
            assert cosine_of(np.asarray(got["dense"]), want) > 1 - 1e-5
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=90) == 0, log.read_text()
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, [p.name() for p in alive]
    finally:
        if process.poll() is None:
            process.kill()
