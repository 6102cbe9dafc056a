import subprocess
import sys

import pytest

from sie.server.cli import _settings
from sie.settings.common import PACKAGED_MODELS_DIR
from sie.settings.server import Settings


def test_defaults_match_the_public_server():
    settings = Settings()
    assert (settings.max_batch_requests, settings.max_batch_wait_ms, settings.max_concurrent_requests) == (
        64,
        10,
        512,
    )
    assert (
        settings.port == 8080
        and settings.device == "auto"
        and settings.models_dir == str(PACKAGED_MODELS_DIR)
    )


def test_tokenizer_threads_leave_the_cores_to_a_cpu_forward_unless_set(monkeypatch):
    monkeypatch.delenv("SIE_PREPROCESSOR_WORKERS", raising=False)
    settings = Settings()
    assert settings.tokenizer_threads("cpu") == 1
    assert settings.tokenizer_threads("cuda:0") == 4
    monkeypatch.setenv("SIE_PREPROCESSOR_WORKERS", "3")
    assert Settings().tokenizer_threads("cpu") == 3


def test_cli_beats_env_beats_default(monkeypatch):
    monkeypatch.setenv("SIE_PORT", "9000")
    monkeypatch.setenv("SIE_DEVICE", "cpu")
    monkeypatch.setenv("SIE_MODEL_FILTER", "a/b, c/d")
    settings = _settings(port=9100, device=None)
    assert settings.port == 9100
    assert settings.device == "cpu"
    assert settings.filter_list() == ["a/b", "c/d"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sie.server", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_invalid_yaml_stops_startup_with_file_field_and_reason(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sie_id: x/y\nhf_id: x/y\nprofiles:\n  default:\n    max_batch_tokens: zero\n")
    result = run_cli("serve", "--models-dir", str(tmp_path), "--port", "0")
    assert result.returncode == 1
    assert str(bad) in result.stderr
    assert "profiles.default.max_batch_tokens" in result.stderr
    assert "valid integer" in result.stderr


@pytest.mark.parametrize("flag", ["--models", "--preload"])
def test_unknown_model_in_filter_or_preload_is_a_startup_error(flag):
    result = run_cli("serve", flag, "no/such-model", "--port", "0")
    assert result.returncode == 1
    assert "no/such-model" in result.stderr


def test_openapi_command_prints_the_document(tmp_path):
    out = tmp_path / "openapi.json"
    result = run_cli("openapi", "-o", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "/v1/encode/{model}" in text and "EncodeRequest" in text and "/v1/embeddings" in text


def test_unreachable_s3_models_dir_stops_startup_with_the_reason(monkeypatch):
    from tests.s3 import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    result = run_cli("serve", "--models-dir", "s3://models/catalog", "--port", "0")
    assert result.returncode == 1
    assert "s3://models/catalog: models directory could not be listed: " in result.stderr
    assert "Could not connect to the endpoint URL" in result.stderr


def test_weight_tier_flags_and_variables():
    settings = _settings(cluster_cache="s3://bucket/hub", hf_fallback=False)
    assert (settings.cluster_cache, settings.hf_fallback) == ("s3://bucket/hub", False)
    assert (settings.disk_cache_enabled, settings.disk_pressure_threshold_percent) == (True, 85.0)
