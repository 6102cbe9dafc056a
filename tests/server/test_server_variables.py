"""The server-side seed variables acted on, with real models (the packaged MiniLM and SPLADE, a tiny
CLIP built from a config) and the real app in process:

- ``SIE_PINNED_MODELS``: loaded at start and never evicted, under memory pressure or idle, while the
  same model unpinned is evicted first;
- ``SIE_EXTRA_MODELS``: served beside a ``--models`` selection; an unknown id refuses the start;
- ``SIE_IMAGE_WORKERS``: requests carrying images are prepared on that many ``sie-img`` threads;
- ``SIE_INSTRUMENTATION``: one log line per batch and a summary per model when it stops;
- ``SIE_DEVICES``: one device that exists here, else a refused start (the CLI exits 1 and says why);
- ``SIE_IPC_SOCKET_PATH`` / ``SIE_IPC_POOL_SIZE``: one warning that they have no effect.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import msgpack
import pytest
import pytest_asyncio
import torch
from typer.testing import CliRunner

from sie.adapters.runtime.device import resolve_device
from sie.catalog.catalog import Catalog
from sie.core.options import ComputePrecision, OutputType
from sie.engine.engine import Engine, EngineLimits
from sie.engine.instrumentation import HISTORY, BatchStatistics
from sie.engine.loader import LoadSettings, ModelState
from sie.engine.worker import BatchStats
from sie.observability.metrics import Metrics
from sie.server.app import create_app
from sie.server.build import build_catalog
from sie.server.cli import app as cli
from sie.server.runtime import EngineRuntime
from sie.settings.common import PACKAGED_MODELS_DIR
from sie.settings.server import Settings
from sie.weights.sources import WeightSources
from sie.wire.requests import EncodeParams, EncodeRequest, Item
from tests import builders
from tests.conftest import random_png
from tests.e2e.conftest import tiny_bert_dir
from tests.inprocess import served

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SPLADE = "rasyosef/splade-tiny"
CLIP = "test/clip"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA devices")


def state(engine: Engine, model: str) -> ModelState:
    return next(s.state for s in engine.slots() if s.entry.name == model)


async def encoded(engine: Engine, model: str, texts: list[str]) -> None:
    output = OutputType.SPARSE if model == SPLADE else OutputType.DENSE
    request = EncodeRequest([Item(text=text) for text in texts], EncodeParams(output_types=[output]))
    await engine.encode(model, request, wait_loaded=True)


async def until(condition: Callable[[], bool], timeout_s: float = 20) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.02)


# -- SIE_PINNED_MODELS -----------------------------------------------------------------------------


def budget_settings(**pinned: str) -> Settings:
    """Both packaged models served under a 1-byte weight budget: always over the threshold, so every
    load first evicts what it may, and the watcher (every second) evicts down to one model."""
    return Settings(
        model_filter=f"{MINILM},{SPLADE}",
        memory_limit_bytes=1,
        hot_reload=False,
        default_compute_precision="float32",
        **pinned,
    )


async def test_a_pinned_model_loads_at_start_and_survives_memory_pressure() -> None:
    async with EngineRuntime(budget_settings(pinned_models=MINILM)) as engine:
        assert state(engine, MINILM) is ModelState.LOADED  # loaded before serving, never asked for
        await encoded(engine, SPLADE, ["a b"])  # loading it evicts nothing: MiniLM is pinned
        assert state(engine, MINILM) is ModelState.LOADED
        # Over the budget with two loaded, the watcher evicts the unpinned one, though it was used last.
        await until(lambda: state(engine, SPLADE) is ModelState.AVAILABLE)
        await asyncio.sleep(1.5)  # another watcher round: the pinned model is still there
        assert state(engine, MINILM) is ModelState.LOADED


async def test_the_same_model_unpinned_is_evicted_first() -> None:
    async with EngineRuntime(budget_settings()) as engine:
        await encoded(engine, MINILM, ["a b"])
        await encoded(engine, SPLADE, ["a b"])  # MiniLM, least recently used, makes room for it
        assert state(engine, MINILM) is ModelState.AVAILABLE
        assert state(engine, SPLADE) is ModelState.LOADED


async def test_a_pinned_model_is_never_idle_evicted(tmp_path: Path) -> None:
    """``SIE_IDLE_EVICT_S`` is at least 10 s as a setting; the engine's own limits make it 0.2 s."""
    catalog = Catalog.from_directory(PACKAGED_MODELS_DIR, [MINILM, SPLADE])
    load = LoadSettings(
        "cpu", ComputePrecision.FLOAT32, 1, WeightSources(tmp_path / "cache", hf_fallback=False)
    )
    limits = EngineLimits(8, 1, 64, 1, idle_evict_s=0.2, memory_check_s=0.05, pinned=frozenset({MINILM}))
    async with Engine(catalog, load, limits, Metrics()) as engine:
        await encoded(engine, MINILM, ["a b"])
        await encoded(engine, SPLADE, ["a b"])
        await until(lambda: state(engine, SPLADE) is ModelState.AVAILABLE)
        await asyncio.sleep(0.5)  # idle more than twice the TTL, ten watcher rounds
        assert state(engine, MINILM) is ModelState.LOADED


async def test_a_pinned_model_loads_when_its_config_arrives(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With no selection, a pinned id the models dir lacks is a warning at start, and the model loads as
    soon as a hot reload or sie-config brings its config, without a request."""
    with caplog.at_level(logging.WARNING, logger="sie.server.build"):
        _, start = build_catalog(Settings(models_dir=str(tmp_path), pinned_models=SPLADE))
    assert start == []
    assert f"SIE_PINNED_MODELS: {SPLADE} not in the catalogue yet; pinned once served" in caplog.messages
    load = LoadSettings(
        "cpu", ComputePrecision.FLOAT32, 1, WeightSources(tmp_path / "cache", hf_fallback=False)
    )
    limits = EngineLimits(8, 1, 64, 1, pinned=frozenset({SPLADE}))
    async with Engine(
        Catalog.from_directory(PACKAGED_MODELS_DIR, [MINILM]), load, limits, Metrics()
    ) as engine:
        await engine.apply_catalog(Catalog.from_directory(PACKAGED_MODELS_DIR, [MINILM, SPLADE]))
        await until(lambda: state(engine, SPLADE) is ModelState.LOADED)
        assert state(engine, MINILM) is ModelState.AVAILABLE  # not pinned: loads on first use only


def test_pinned_and_extra_models_against_the_selection() -> None:
    catalog, start = build_catalog(
        Settings(model_filter=MINILM, extra_models=SPLADE, pinned_models=SPLADE, preload_models=MINILM)
    )
    assert sorted(catalog.names()) == [SPLADE, MINILM, f"{MINILM}:candle"]  # a sie_id keeps its variants
    assert start == [MINILM, SPLADE]  # preloaded, then pinned
    with pytest.raises(
        ValueError, match=r"^SIE_EXTRA_MODELS names model\(s\) not in the models dir: org/nope$"
    ):
        build_catalog(Settings(model_filter=MINILM, extra_models="org/nope"))
    with pytest.raises(ValueError, match=rf"^SIE_PINNED_MODELS names model\(s\) not being served: {SPLADE}$"):
        build_catalog(Settings(model_filter=MINILM, pinned_models=SPLADE))


def test_sie_extra_models_from_the_environment_name_a_profile_variant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The public use: a variant id (``model:profile``) the selection does not list, served beside it."""
    monkeypatch.setenv("SIE_MODEL_FILTER", SPLADE)
    assert build_catalog(Settings())[0].names() == [SPLADE]
    monkeypatch.setenv("SIE_EXTRA_MODELS", f" {MINILM}:candle ,")
    assert build_catalog(Settings())[0].names() == [SPLADE, f"{MINILM}:candle"]


# -- SIE_IMAGE_WORKERS -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clip_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("image-workers")
    weights = builders.clip(tiny_bert_dir(), root / "clip")
    models = root / "models"
    models.mkdir()
    (models / "clip.yaml").write_text(
        f'sie_id: {CLIP}\nweights_path: "{weights}"\ninputs: {{text: true, image: true}}\n'
        "tasks: {encode: {dense: {dim: 16}}}\nmax_sequence_length: 77\n"
        'profiles: {default: {max_batch_tokens: 8192, adapter_path: "sie.adapters.clip:ClipEncoder"}}\n'
    )
    return models


def named(prefix: str) -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith(prefix)}


@pytest_asyncio.fixture
async def clip_server(clip_models: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        models_dir=str(clip_models),
        preload_models=CLIP,
        hot_reload=False,
        default_compute_precision="float32",
        image_workers=3,
    )
    async with served(create_app(settings)) as client:
        yield client


async def test_image_requests_are_prepared_on_sie_image_workers_threads(
    clip_server: httpx.AsyncClient,
) -> None:
    before_img, before_tok = named("sie-img"), named("sie-tok")
    bodies = [
        msgpack.packb({"items": [{"images": [{"data": random_png(640, 480, seed)}]}]}) for seed in range(12)
    ]
    headers = {"content-type": "application/msgpack", "accept": "application/msgpack"}
    answers = await asyncio.gather(
        *(clip_server.post(f"/v1/encode/{CLIP}", content=body, headers=headers) for body in bodies)
    )
    assert [a.status_code for a in answers] == [200] * 12
    grown = named("sie-img") - before_img
    assert len(grown) == 3, grown  # twelve requests at once: the pool grew to its size, and no further
    assert named("sie-tok") == before_tok  # no image request went to the tokenization threads
    text = await clip_server.post(f"/v1/encode/{CLIP}", json={"items": [{"text": "x " * 100}]})
    assert text.status_code == 200
    assert named("sie-img") - before_img == grown  # and text goes elsewhere


def test_image_threads_default_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (Settings().image_threads("cpu"), Settings().image_threads("cuda:0")) == (1, 4)
    monkeypatch.setenv("SIE_IMAGE_WORKERS", "6")
    assert (Settings().image_threads("cpu"), Settings().image_threads("cuda:0")) == (6, 6)


# -- SIE_INSTRUMENTATION ---------------------------------------------------------------------------

BATCH_LINE = re.compile(
    r"^batch #(\d+) of (\S+): items=(\d+) requests=(\d+) tokens=(\d+) padded_tokens=(\d+) padding=(\d+)% "
    r"wait_ms=[\d.]+ forward_ms=[\d.]+$"
)


async def instrumented_run(instrumentation: bool, caplog: pytest.LogCaptureFixture) -> list[str]:
    settings = Settings(
        model_filter=MINILM,
        preload_models=MINILM,
        hot_reload=False,
        default_compute_precision="float32",
        instrumentation=instrumentation,
    )
    with caplog.at_level(logging.INFO, logger="sie.engine.instrumentation"):
        async with served(create_app(settings)) as client:
            texts = ["one", "two words here", "three words, and more of them"]
            response = await client.post(f"/v1/encode/{MINILM}", json={"items": [{"text": t} for t in texts]})
            assert response.status_code == 200
    return [r.getMessage() for r in caplog.records if r.name == "sie.engine.instrumentation"]


async def test_instrumentation_logs_each_batch_and_a_summary(caplog: pytest.LogCaptureFixture) -> None:
    lines = await instrumented_run(True, caplog)
    batch = [m for line in lines if (m := BATCH_LINE.match(line))]
    assert len(batch) == 1, lines
    number, model, items, requests, tokens, padded, padding = batch[0].groups()
    assert (number, model, items, requests) == ("1", MINILM, "3", "1")
    assert 0 < int(tokens) <= int(padded)
    assert int(padding) == round(100 * (1 - int(tokens) / int(padded)))
    summary = next(line for line in lines if line.startswith("batch statistics of"))  # at shutdown
    assert summary.startswith(
        f"batch statistics of {MINILM}: 1 batches (the last 1 below)\n  items/batch: min=3.0"
    )


async def test_without_instrumentation_nothing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    assert await instrumented_run(False, caplog) == []


def test_statistics_keep_the_newest_batches_and_count_padding() -> None:
    statistics = BatchStatistics("m", packs_tokens=False)
    logging.getLogger("sie.engine.instrumentation").disabled = True
    try:
        for _ in range(HISTORY + 5):
            statistics.record(
                BatchStats(items=2, tokens=3, seconds=0.001, requests=2, longest=2, wait_s=0.002)
            )
        assert statistics.batches == HISTORY + 5 and len(statistics.items) == HISTORY
    finally:
        logging.getLogger("sie.engine.instrumentation").disabled = False
    assert statistics.padding[-1] == pytest.approx(0.25)  # 3 tokens in a 2 x 2 padded batch
    packed = BatchStatistics("m", packs_tokens=True)
    packed.record(BatchStats(items=2, tokens=3, seconds=0.001, longest=2))
    assert packed.padding[-1] == 0.0
    assert "padding %: min=0.0 mean=0.0 p50=0.0 max=0.0" in packed.summary()


# -- SIE_DEVICES -----------------------------------------------------------------------------------


@NO_CUDA
@pytest.mark.parametrize(
    ("device", "devices", "message"),
    [
        ("auto", "cuda:0", "SIE_DEVICES: device 'cuda:0' does not exist here (no cuda device)"),
        ("cpu", "cpu:1", "SIE_DEVICES: device 'cpu:1' does not exist here (1 cpu device(s))"),
        ("auto", "tpu:0", "SIE_DEVICES: 'tpu:0' is not a device (cpu, cuda, cuda:N or mps)"),
        ("auto", "cuda:0,cpu", "SIE_DEVICES mixes device families (cpu, cuda); name devices of one"),
        ("mps", "cuda:0", "SIE_DEVICE family 'mps' must match SIE_DEVICES family 'cuda'"),
        ("cuda:3", None, "SIE_DEVICE: device 'cuda:3' does not exist here (no cuda device)"),
    ],
)
def test_a_device_that_is_not_here_refuses_the_start(device: str, devices: str | None, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        create_app(Settings(device=device, devices=devices, model_filter=MINILM))
    assert str(refused.value) == message


def test_several_devices_refuse_the_start_with_how_to_use_them() -> None:
    with pytest.raises(
        ValueError, match=r"^SIE_DEVICES names 2 devices \(cuda:0, cuda:1\); .* one server per device"
    ):
        create_app(Settings(devices="cuda:0,cuda:1, cuda:0", model_filter=MINILM))


def test_one_listed_device_is_the_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIE_DEVICES", "cpu")
    assert EngineRuntime(Settings(model_filter=MINILM)).device == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_devices_that_exist_and_one_that_does_not() -> None:
    count = torch.cuda.device_count()
    assert resolve_device("auto", [f"cuda:{count - 1}"]) == f"cuda:{count - 1}"
    assert resolve_device("cpu", ["cuda:0"]) == "cuda:0"  # cpu adopts the list's family, as the public server
    with pytest.raises(ValueError, match=f"device 'cuda:{count}' does not exist here \\({count} cuda device"):
        resolve_device("cuda", [f"cuda:{count}"])


@NO_CUDA
def test_the_cli_exits_1_naming_the_missing_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIE_DEVICES", "cuda:1")
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:  # serve configures logging for the process: this one's is pytest's again after
        done = CliRunner().invoke(cli, ["serve", "--models", MINILM])
    finally:
        root.handlers[:], root.level = handlers, level
    assert done.exit_code == 1
    assert "error: SIE_DEVICES: device 'cuda:1' does not exist here (no cuda device)" in done.output


# -- SIE_IPC_SOCKET_PATH / SIE_IPC_POOL_SIZE -------------------------------------------------------


def test_the_sidecar_variables_are_answered_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="sie.server.app"):
        create_app(Settings(model_filter=MINILM))
    assert not [r for r in caplog.records if "SIE_IPC" in r.getMessage()]
    monkeypatch.setenv("SIE_IPC_SOCKET_PATH", "/tmp/sie-ipc.sock")
    monkeypatch.setenv("SIE_IPC_POOL_SIZE", "4")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sie.server.app"):
        create_app(Settings(model_filter=MINILM))
    (record,) = [r for r in caplog.records if "SIE_IPC" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "SIE_IPC_SOCKET_PATH and SIE_IPC_POOL_SIZE: no effect here; this server runs its queue client in "
        "the model process (no sidecar and no IPC socket), so there is nothing to connect to"
    )
