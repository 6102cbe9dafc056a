"""Where a LoRA's files come from (audit H3): names in the LoRA root and nothing around it, a declared
Hub id from the models' cache (read only) or copied into the LoRA cache, a copy over the cap refused,
the Hub off unless the operator allows it, and no model's weights evicted for a LoRA. Real folders, a
plain-folder cluster cache and real PEFT LoRA files."""

from __future__ import annotations

from pathlib import Path

import pytest

from sie.weights.disk_cache import MARKER
from sie.weights.errors import WeightsNotFound
from sie.weights.lora_sources import NAMES_SHOWN, LoraSettings, LoraSources, is_name
from sie.weights.sources import WeightSources
from tests import builders
from tests.hub import running_hub

LORA = "org/tuned-lora"
REVISION = "0123abcd"


def snapshot_of(root: Path, hf_id: str) -> Path:
    return root / f"models--{hf_id.replace('/', '--')}" / "snapshots" / REVISION


@pytest.fixture(scope="module")
def peft_lora(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.lora(minilm_dir, tmp_path_factory.mktemp("peft") / "lora", 1, ["query", "value"])


def files_of(folder: Path) -> dict[str, bytes]:
    """The files a copy keeps (a model card stays behind)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith("README")
    }


@pytest.mark.parametrize("lora_id", ["/etc", "~", "..", ".", "../x", "a/b", "a\\b", ".hidden", "-x", "", "é"])
def test_a_name_is_one_plain_folder_name(lora_id: str) -> None:
    assert not is_name(lora_id)


def test_names_resolve_inside_the_root_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "named").mkdir(parents=True)
    (root / "file.txt").write_text("not a folder")
    (tmp_path / "outside").mkdir()
    sources = LoraSources(WeightSources(tmp_path / "cache", hf_fallback=False), LoraSettings(root=root))
    assert sources.under_root("named") == root / "named"
    for lora_id in ("../outside", str(tmp_path / "outside"), "named/..", "file.txt", "missing", "~"):
        assert sources.under_root(lora_id) is None
    assert sources.root_names() == ["named"]
    unrooted = LoraSources(WeightSources(tmp_path / "cache", hf_fallback=False))
    assert unrooted.under_root("named") is None and unrooted.root_names() == []


def test_the_root_names_an_error_lists_are_bounded(tmp_path: Path) -> None:
    for i in range(NAMES_SHOWN + 5):
        (tmp_path / f"lora-{i:02d}").mkdir()
    sources = LoraSources(WeightSources(tmp_path / "cache"), LoraSettings(root=tmp_path))
    assert sources.root_names() == [f"lora-{i:02d}" for i in range(NAMES_SHOWN)]


def test_a_declared_lora_in_the_models_cache_is_read_there(tmp_path: Path, peft_lora: Path) -> None:
    cached = snapshot_of(tmp_path / "models", LORA)
    cached.parent.mkdir(parents=True)
    cached.symlink_to(peft_lora, target_is_directory=True)
    sources = LoraSources(WeightSources(tmp_path / "models", hf_fallback=False))
    assert sources.declared(LORA, None) == cached
    assert not (cached.parent.parent / MARKER).exists()  # read, not touched: the models' LRU is theirs


def test_a_cluster_copy_goes_to_the_lora_cache_and_evicts_no_model(tmp_path: Path, peft_lora: Path) -> None:
    models = tmp_path / "models"
    model = models / "models--org--a-model" / "snapshots" / "abc"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights")
    cluster = tmp_path / "cluster"
    snapshot_of(cluster, LORA).parent.mkdir(parents=True)
    snapshot_of(cluster, LORA).symlink_to(peft_lora, target_is_directory=True)
    # A disk "always full" for the models' cache: a model fetch would evict every other model first.
    weights = WeightSources(
        models, hf_fallback=False, cluster_cache=str(cluster), disk_pressure_threshold_percent=0.0
    )
    sources = LoraSources(weights)
    copied = sources.declared(LORA, None)
    assert copied == snapshot_of(models / "sie-loras", LORA)
    assert files_of(copied) == files_of(peft_lora)
    assert (model / "model.safetensors").read_bytes() == b"weights"  # the model stayed
    assert weights.cached(LORA) is None  # and the models' cache holds no LoRA
    # The next resolve is served from the LoRA cache, the cluster cache gone.
    gone = LoraSources(WeightSources(models, hf_fallback=False, cluster_cache=str(tmp_path / "nowhere")))
    assert gone.declared(LORA, None) == copied


def test_a_lora_over_the_cap_is_not_copied(tmp_path: Path, peft_lora: Path) -> None:
    cluster = tmp_path / "cluster"
    snapshot_of(cluster, LORA).parent.mkdir(parents=True)
    snapshot_of(cluster, LORA).symlink_to(peft_lora, target_is_directory=True)
    size = sum(len(data) for data in files_of(peft_lora).values())
    cache = tmp_path / "lora-cache"
    sources = LoraSources(
        WeightSources(tmp_path / "models", hf_fallback=False, cluster_cache=str(cluster)),
        LoraSettings(max_bytes=size - 1, cache=cache),
    )
    with pytest.raises(
        WeightsNotFound, match=rf"\(refused: {size} bytes, over the cap of {size - 1} bytes\)"
    ):
        sources.declared(LORA, None)
    assert not any(p.is_file() for p in cache.rglob("*"))  # nothing copied
    at_cap = LoraSources(sources.models, LoraSettings(max_bytes=size, cache=cache))
    assert files_of(at_cap.declared(LORA, None)) == files_of(peft_lora)


def test_the_hub_is_off_for_loras_unless_the_operator_allows_it(tmp_path: Path) -> None:
    models = WeightSources(tmp_path / "models", hf_fallback=True)  # on for models, not for LoRAs
    with pytest.raises(
        WeightsNotFound, match=r"hub download of 'org/tuned-lora' \(disabled: SIE_LORA_HF_FALLBACK"
    ):
        LoraSources(models).declared(LORA, None)
    allowed = LoraSources(models, LoraSettings(hf_fallback=True))
    with pytest.raises(WeightsNotFound, match=r"hub download of 'org/tuned-lora' \(offline: HF_HUB_OFFLINE"):
        allowed.declared(LORA, None)  # asked (offline in tests): allowed reaches the download step


def test_a_declared_folder_is_the_operators_path(tmp_path: Path, peft_lora: Path) -> None:
    sources = LoraSources(WeightSources(tmp_path / "models", hf_fallback=False))
    assert sources.declared(str(peft_lora), None) == peft_lora
    assert sources.declared("./lora", peft_lora.parent) == peft_lora


def test_a_hub_download_over_the_cap_is_refused_before_any_file_is_fetched(tmp_path: Path) -> None:
    """Through ``huggingface_hub`` against a Hub stand-in: the repository's file list is read, its
    size is over the cap, and no file is asked for."""
    size = 10 * 1024 * 1024
    with pytest.MonkeyPatch.context() as patch, running_hub(patch) as hub:
        hub.repos[LORA] = {"adapter_config.json": 600, "adapter_model.safetensors": size, "README.md": 9}
        sources = LoraSources(
            WeightSources(tmp_path / "models", hf_fallback=False),
            LoraSettings(hf_fallback=True, max_bytes=size),
        )
        with pytest.raises(WeightsNotFound, match=rf"hub download of '{LORA}' \(refused: {size + 600} bytes"):
            sources.declared(LORA, None)
    # Its file list, read once; no snapshot listing, no file (the old path went on to both).
    assert [path for path in hub.asked if LORA in path] == [f"/api/models/{LORA}?blobs=true"]
    assert not any(p.is_file() for p in sources.cache_root().rglob("*"))  # nothing downloaded
