"""Bundles: the shipped default bundle, filtering a models dir by bundle (settings/env and CLI), the
``--bundle``/``--models`` exclusions, and ``bundle_config_hash``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sie.catalog.bundles import adapter_module, bundle_config_hash, bundle_names, load_bundle
from sie.catalog.catalog import Catalog
from sie.catalog.families import KNOWN, not_served
from sie.server.build import build_catalog
from sie.settings.common import PACKAGED_BUNDLES_DIR
from sie.settings.server import Settings
from tests.conftest import MODELS_DIR

MODELS = {
    "dense.yaml": """
sie_id: org/dense
hf_id: org/dense
tasks: {encode: {dense: {dim: 8}}}
profiles:
  default: {max_batch_tokens: 1024, adapter_path: "sie.adapters.dense_torch:TorchDenseEncoder"}
""",
    # Written for the public server: its adapter name, a profile of another family, a revision.
    "gliner.yaml": """
sie_id: org/gliner
hf_id: org/gliner
hf_revision: abc123
tasks: {extract: {}}
profiles:
  default:
    max_batch_tokens: 2048
    compute_precision: float16
    adapter_path: "sie_server.adapters.gliner:GLiNERAdapter"
    adapter_options: {runtime: {threshold: 0.45}}
  fast:
    extends: default
    adapter_options: {loadtime: {compile: true}}
""",
    # A later public release names some adapters by their package's ``adapter`` submodule.
    "siglip.yaml": """
sie_id: org/siglip
hf_id: org/siglip
tasks: {encode: {dense: {dim: 8}}}
profiles:
  default: {max_batch_tokens: 1024, adapter_path: "sie_server.adapters.siglip.adapter:SiglipAdapter"}
""",
    "generator.yaml": """
sie_id: org/generator
hf_id: org/generator
profiles:
  default: {max_batch_tokens: 4096, adapter_path: "sie_server.adapters.sglang.generation:SGLangGenerationAdapter"}
""",
}
BUNDLES = {
    # Names our module: selects the public-named GLiNER YAML through its alias too.
    "extract.yaml": "name: extract\npriority: 20\nadapters:\n- sie.adapters.gliner\n",
    "generation.yaml": "name: generation\nadapters:\n- sie_server.adapters.sglang.generation\ndeps: {sglang: '==0.5'}\n",
}


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    models, bundles = tmp_path / "models", tmp_path / "bundles"
    models.mkdir()
    bundles.mkdir()
    for name, text in MODELS.items():
        (models / name).write_text(text)
    for name, text in BUNDLES.items():
        (bundles / name).write_text(text)
    return models, bundles


def test_default_bundle_lists_every_adapter_module_we_run_and_the_public_defaults_we_refuse() -> None:
    default = load_bundle("default", PACKAGED_BUNDLES_DIR)
    assert default.default and default.name == "default" and default.engine == "pytorch"
    ours = {adapter_module(path) for path in KNOWN}
    # Generation is the public SGLang bundles' (sie-config routes a generative config there, as the
    # public service does), our generation module included.
    sglang = {
        m for name in ("sglang", "sglang-cu130") for m in load_bundle(name, PACKAGED_BUNDLES_DIR).adapters
    }
    assert "sie.adapters.generation.causal_lm" in sglang
    assert ours - sglang <= default.adapters
    refused = default.adapters - ours
    assert "sie_server.adapters.whisper.adapter" in refused
    assert all(not_served(f"{module}:Any") for module in refused)


GENERATOR = "sie.adapters.generation.causal_lm:CausalLmGenerator"


def test_every_shipped_public_model_is_in_a_shipped_bundle_and_ours_run_in_default() -> None:
    """A public family we do not run is in the bundle the public server lists it in (sglang,
    transformers5...), so sie-config accepts its configs as the public one does; the families we run
    are all in the default bundle, and no other bundle takes one of them, but generation: the sglang
    bundle's, as in the public cluster."""
    catalog = Catalog.from_directory(MODELS_DIR)
    bundles = [load_bundle(name, PACKAGED_BUNDLES_DIR) for name in bundle_names(PACKAGED_BUNDLES_DIR)]
    default = next(b for b in bundles if b.name == "default")
    generative = {e.name for e in catalog.entries() if e.profile.adapter_path == GENERATOR}
    assert "Qwen/Qwen3-0.6B" in generative
    served = [
        e.name
        for e in catalog.entries()
        if not_served(e.profile.adapter_path) is None and e.name not in generative
    ]
    selected = default.select(catalog).names()
    assert [name for name in selected if name in served] == served
    for entry in catalog.entries():
        path = entry.profile.adapter_path
        takers = [b.name for b in bundles if b.serves(entry)]
        if path.startswith(("sie_server.", "sie_server_rust.")):
            assert takers, entry.name
        if not_served(path) is None:
            assert takers == (["sglang"] if entry.name in generative else ["default"]), entry.name
    by_name = {b.name: b for b in bundles}
    assert by_name["candle"].engine == "candle" and by_name["sglang"].priority == 20


def test_bundle_filters_the_models_dir_by_adapter_module(dirs: tuple[Path, Path]) -> None:
    models, bundles = dirs

    def served(bundle: str | None) -> list[str]:
        settings = Settings(models_dir=str(models), bundles_dir=bundles, bundle=bundle)
        return sorted(build_catalog(settings)[0].names())

    assert served(None) == ["org/dense", "org/generator", "org/gliner", "org/gliner:fast", "org/siglip"]
    assert served("extract") == ["org/gliner", "org/gliner:fast"]
    assert served("generation") == ["org/generator"]
    default = Settings(models_dir=str(models), bundle="default")  # the shipped bundle over this dir
    assert sorted(build_catalog(default)[0].names()) == [
        "org/dense",
        "org/gliner",
        "org/gliner:fast",
        "org/siglip",
    ]


def test_sie_bundle_from_the_environment(dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    models, bundles = dirs
    monkeypatch.setenv("SIE_BUNDLE", "generation")
    monkeypatch.setenv("SIE_BUNDLES_DIR", str(bundles))
    monkeypatch.setenv("SIE_MODELS_DIR", str(models))
    assert build_catalog(Settings())[0].names() == ["org/generator"]
    # A model filter within the bundle narrows it; one outside it stops startup.
    monkeypatch.setenv("SIE_MODEL_FILTER", "org/dense")
    with pytest.raises(ValueError, match="outside bundle 'generation': org/dense"):
        build_catalog(Settings())


def test_unknown_bundle_stops_startup(dirs: tuple[Path, Path]) -> None:
    models, bundles = dirs
    with pytest.raises(ValueError, match=r"Bundle 'nope' not found .*bundles: extract, generation"):
        build_catalog(Settings(models_dir=str(models), bundles_dir=bundles, bundle="nope"))


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    child = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
    code = "from sie.server.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "serve", "--port", "1", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**child, **(env or {})},
        check=False,
    )


def test_cli_refuses_bundle_with_models_and_a_bundle_other_than_the_image_one(
    dirs: tuple[Path, Path],
) -> None:
    models, bundles = dirs
    both = _serve("--bundle", "extract", "--models", "org/dense")
    assert both.returncode == 1 and "cannot specify both --bundle and --models" in both.stderr
    baked = _serve("--bundle", "extract", env={"SIE_BUNDLE": "generation"})
    assert baked.returncode == 1 and "differs from this image's bundle 'generation'" in baked.stderr
    unknown = _serve("--bundle", "nope", "--models-dir", str(models), env={"SIE_BUNDLES_DIR": str(bundles)})
    assert unknown.returncode == 1 and "Bundle 'nope' not found" in unknown.stderr


def test_bundle_config_hash_is_sha256_of_the_public_canonical_json(dirs: tuple[Path, Path]) -> None:
    models, bundles = dirs
    catalog = Catalog.from_directory(models)
    # Written out by hand from the public definition: models with a profile whose adapter module the
    # bundle lists as written, profiles resolved through `extends`, empty option halves dropped.
    expected = [
        {
            "sie_id": "org/gliner",
            "revision": "abc123",
            "profiles": [
                {
                    "name": "default",
                    "config": {
                        "adapter_path": "sie_server.adapters.gliner:GLiNERAdapter",
                        "max_batch_tokens": 2048,
                        "compute_precision": "float16",
                        "adapter_options": {"runtime": {"threshold": 0.45}},
                    },
                },
                {
                    "name": "fast",
                    "config": {
                        "adapter_path": "sie_server.adapters.gliner:GLiNERAdapter",
                        "max_batch_tokens": 2048,
                        "compute_precision": "float16",
                        "adapter_options": {"loadtime": {"compile": True}, "runtime": {"threshold": 0.45}},
                    },
                },
            ],
        }
    ]
    digest = hashlib.sha256(json.dumps(expected, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert bundle_config_hash(catalog, load_bundle("default", PACKAGED_BUNDLES_DIR)) != digest  # dense too
    public_gliner = (bundles / "public.yaml").write_text(
        "name: public\nadapters: [sie_server.adapters.gliner]\n"
    )
    assert public_gliner
    assert bundle_config_hash(catalog, load_bundle("public", bundles)) == digest
    # Scope is literal: our module name does not pull the public-named YAML into the hash.
    assert bundle_config_hash(catalog, load_bundle("extract", bundles)) == ""
