"""``/openapi.json`` is fuzzed by schemathesis against a real server: the document must be true.

The CLI runs exactly as a user would (``schemathesis run --checks all``), in a subprocess, against a
server that serves the default model alone: no 5xx, no status or body the document does not declare,
no schema-invalid request accepted and no schema-valid one refused. What comes from outside the
document is in ``schemathesis_hooks.py``: msgpack bodies are sent and read as the wire carries them
(so msgpack answers are validated too), and a model-capability refusal (a text model given only an
image) is not counted as a refused schema-valid request, since no schema of a multi-model route can
foresee it.

The fuzzer reaches the model through the ``{model}`` example the document carries and a dictionary
that names it in half the ``{model}`` parameters and ``/v1/embeddings`` bodies (the rest name unknown
ids and must get 404); ``/metrics`` afterwards proves it got real answers. The seed is fixed and the
example count bounded: about 35 s on two idle cores.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
SEED = 20261123
MAX_EXAMPLES = 30
RUN_TIMEOUT_S = 240
CONFIG = f"""
[dictionaries.models]
values = ["{MODEL}"]

[parameters]
"path.model" = {{ dictionary = "models", probability = 0.5 }}
"body.model" = {{ dictionary = "models", probability = 0.5 }}
"""


def _requests(metrics: str, endpoint: str, status: str) -> float:
    pattern = rf'^sie_requests_total{{endpoint="{endpoint}",model="[^"]*",status="{status}"}} (\S+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, metrics, re.MULTILINE))


def run_schemathesis(
    url: str, folder: Path, checks: str, seed: int, max_examples: int, workers: int = 1
) -> str:
    """``schemathesis run`` of the document at ``url`` with this module's hooks and model dictionary,
    as a user runs the CLI; its report, once it passed."""
    config = folder / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        f"{url}/openapi.json",
        "--checks",
        checks,
        "--seed",
        str(seed),
        "--max-examples",
        str(max_examples),
        "--generation-database",
        "none",
        "--continue-on-failure",
        "--workers",
        str(workers),
        "--request-timeout",
        "60",
        "--no-color",
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)}
    try:
        run = subprocess.run(
            command, cwd=folder, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"schemathesis ran past {RUN_TIMEOUT_S} s:\n{exc.stdout}\n{exc.stderr}")
    report = f"{run.stdout}\n{run.stderr}"
    assert run.returncode == 0, f"schemathesis exited {run.returncode}:\n{report}"
    assert "Every selected operation was skipped" not in report, report
    return report


def test_openapi_document_survives_schemathesis(single_model_server, tmp_path: Path) -> None:
    # One worker: with two, the workers' threads build Hypothesis strategies at once, and CPython
    # 3.11's AST constructor is not safe across threads (a run here died generating examples with
    # "SystemError: AST constructor recursion depth mismatch", reported by Hypothesis as a FlakyFailure).
    run_schemathesis(single_model_server.url, tmp_path, "all", SEED, MAX_EXAMPLES, workers=1)

    # The run must have reached inference (not only 404s) and never have drawn a 5xx.
    metrics = single_model_server.client.get("/metrics").text
    assert _requests(metrics, "encode", "200") > 0, metrics
    assert _requests(metrics, "embeddings", "200") > 0, metrics
    assert not re.search(r'^sie_requests_total{[^}]*status="5\d\d"}', metrics, re.MULTILINE), metrics
    single_model_server.assert_serving()
