"""deploy/docker/Dockerfile cannot be built here (no container engine, no registry for base images):
what can be checked is. Every COPY source exists; each image's entrypoint is one of our console scripts
and runs as a non-root user; the CUDA image pins the lock's torch from PyPI (the CUDA wheel) and the CPU
image takes it from PyTorch's CPU index; the chart's images are the Dockerfile's targets; and the
``gateway`` extra the gateway and sie-config images install is enough, alone, to run both."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, running_nats
from tests.deploy.chart import render
from tests.e2e.cluster import ConfigService
from tests.e2e.conftest import MINILM, _free_port

DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
TARGETS = {
    "server": "sie-server",
    "server-cuda": "sie-server",
    "gateway": "sie-gateway",
    "config": "sie-config",
}


def stages() -> dict[str, list[str]]:
    """Each stage's instructions (continuation lines joined), by stage name."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            current = line.split()[-1]
            found[current] = []
        found.setdefault(current, []).append(line)
    return found


def test_every_copy_source_exists_and_every_image_runs_a_console_script_as_non_root() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    all_stages = stages()
    for name, lines in all_stages.items():
        for line in lines:
            if line.startswith("COPY ") and "--from=" not in line:
                sources = line.split()[1:-1]
                missing = [s for s in sources if not (REPO / s).exists()]
                assert not missing, f"{name}: {line}"
            if line.startswith("COPY --from="):
                assert line.split()[1].removeprefix("--from=") in all_stages, line
    for target, script in TARGETS.items():
        lines = all_stages[target]
        entrypoint = json.loads(
            next(line for line in lines if line.startswith("ENTRYPOINT")).split(" ", 1)[1]
        )
        assert entrypoint == [script] and script in scripts
        user = next(line for line in reversed(lines) if line.startswith("USER")).split()[1]
        assert user not in {"0", "root"}
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_the_cuda_image_pins_the_locks_cuda_torch_and_the_cpu_image_the_cpu_build() -> None:
    lock = (REPO / "requirements" / "lock.txt").read_text()
    torch = re.search(r"^torch==(\S+)", lock, re.MULTILINE)
    assert torch is not None
    all_stages = stages()
    cuda = " ".join(all_stages["build-server-cuda"])
    assert '--index-url https://pypi.org/simple "torch==${TORCH}"' in cuda
    assert "s/^torch==" in cuda  # the version is read from the lock, not written twice
    assert "download.pytorch.org/whl/cpu" not in cuda
    cpu = " ".join(all_stages["build-server"])
    assert (
        "--index-url https://download.pytorch.org/whl/cpu" in cpu
        and "--constraint requirements/lock.txt" in cpu
    )
    assert "[gateway]" in " ".join(all_stages["build-gateway"])
    assert (
        all_stages["gateway"][1] == all_stages["config"][1] == "COPY --from=build-gateway /opt/sie /opt/sie"
    )


def test_the_charts_images_are_the_dockerfiles_targets() -> None:
    objects = render(values_file=REPO / "deploy" / "helm" / "sie-cluster" / "values-gpu.yaml")
    images = set()
    for obj in objects:
        if obj["kind"] in {"Deployment", "StatefulSet"} and "nats" not in obj["metadata"]["name"]:
            images |= {c["image"] for c in obj["spec"]["template"]["spec"]["containers"]}
    repositories = {image.rsplit(":", 1)[0].rsplit("/", 1)[1] for image in images}
    assert repositories == {"sie-gateway", "sie-config", "sie-server-cuda"}
    documented = DOCKERFILE.read_text()
    for target in TARGETS:
        assert f"--target {target} " in documented
    assert {f"sie-{target}" for target in TARGETS} >= repositories


@pytest.fixture(scope="module")
def gateway_only_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the project with the ``gateway`` extra alone, at the lock's versions: what the
    gateway and sie-config images install."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv is None:
        pytest.skip("uv not found beside the test interpreter")
    venv = tmp_path_factory.mktemp("gateway-only") / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    lock = REPO / "requirements" / "lock.txt"
    done = subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), "--constraint", str(lock), f"{REPO}[gateway]"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"the gateway extra does not install from the lock:\n{done.stderr}")
    return python


def test_the_gateway_extra_alone_runs_sie_config_and_a_gateway(
    gateway_only_python: Path, tmp_path: Path
) -> None:
    python = gateway_only_python
    probe = (
        "import json, sys, sie.gateway.app, sie.control.app\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = json.loads(
        subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout
    )
    assert not {"torch", "transformers", "tokenizers", "onnxruntime", "gliner"} & set(loaded)
    bin_dir = python.parent
    with running_nats(tmp_path) as nats:
        config = ConfigService(tmp_path / "config", {"SIE_NATS_URL": nats.url}, [str(bin_dir / "sie-config")])
        config.start()
        try:
            assert config.client.get("/v1/configs/epoch").json()["epoch"] == 0
            port = _free_port()
            env = {"SIE_NATS_URL": nats.url, "SIE_CONFIG_SERVICE_URL": config.url, "PATH": "/usr/bin:/bin"}
            with (tmp_path / "gateway.log").open("wb") as log:
                gateway = subprocess.Popen(
                    [bin_dir / "sie-gateway", "serve", "--host", "127.0.0.1", "--port", str(port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            try:
                answer = wait_for_answer(f"http://127.0.0.1:{port}", tmp_path / "gateway.log")
                assert answer["status"] == 202  # no worker: provisioning, after the request's own checks
            finally:
                gateway.terminate()
                gateway.wait(timeout=20)
        finally:
            config.client.close()
            config.stop()


def wait_for_answer(url: str, log: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    response = httpx.post(
        f"{url}/v1/encode/{MINILM}",
        json={"items": [{"text": "x"}], "params": {"options": {"normalize": False}}},
        headers={"accept": "application/json"},
        timeout=30,
    )
    return {"status": response.status_code, "body": response.text}
