"""The LoRAs a request may name (audit H3): what the catalogue refuses before any model is touched, and
the engine's ``Loras`` keeping a bounded number of failures, each told by its class without the
loader's text. On the packaged MiniLM (a real ``TorchDenseEncoder``) and real folders."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sie.adapters.contract import LoadSpec
from sie.adapters.dense_torch import TorchDenseEncoder
from sie.catalog.admission import Admission, RequestLimits
from sie.catalog.catalog import Catalog
from sie.catalog.errors import InvalidInput
from sie.catalog.options import LoraNotAllowed
from sie.core.options import ComputePrecision
from sie.engine.errors import LoraLoading
from sie.engine.loras import MAX_FAILED_LORAS, Loras
from sie.wire.requests import Item
from tests import builders
from tests.conftest import MODELS_DIR

BGE_M3 = "BAAI/bge-m3"
BANKING = "saivamshiatukuri/bge-m3-banking77-lora"  # the shipped bge-m3 profiles' LoRAs
MEDICAL = "doanbao/bge-m3-medical-vn-lora"


@pytest.fixture(scope="module")
def admission() -> Admission:
    return Admission(Catalog.from_directory(MODELS_DIR), RequestLimits())


def admit(admission: Admission, model: str, lora_id: object) -> None:
    admission.entry(model, [Item(text="x")], {"lora_id": lora_id})


def test_a_model_declares_the_loras_of_its_profiles(admission: Admission) -> None:
    entry = admission.require(BGE_M3)
    assert dict(entry.config.loras) == {BANKING: "banking", MEDICAL: "medical-vn"}
    for model in (BGE_M3, f"{BGE_M3}:banking"):
        admit(admission, model, BANKING)
        admit(admission, model, MEDICAL)
    admit(admission, BGE_M3, "a-name.in_the-root")  # a LoRA root's name: the engine looks for it


@pytest.mark.parametrize(
    "lora_id",
    ["/etc", "~", "~root", "../x", "./x", "..", ".", "a/../../x", "someorg/undeclared", "C:\\x", "a b", "é"],
)
def test_anything_else_is_refused_at_admission_naming_the_declared_ones(
    admission: Admission, lora_id: str
) -> None:
    with pytest.raises(LoraNotAllowed) as caught:
        admit(admission, BGE_M3, lora_id)
    message = str(caught.value)
    assert message.startswith(f"LoRA '{lora_id}' is not available for model '{BGE_M3}'. Allowed: ")
    assert BANKING in message and MEDICAL in message and "LoRA root" in message
    assert isinstance(caught.value, InvalidInput)  # 400 INVALID_INPUT


def test_a_huge_id_is_echoed_cut_short(admission: Admission) -> None:
    with pytest.raises(LoraNotAllowed) as caught:
        admit(admission, BGE_M3, "/" * 100_000)
    assert len(str(caught.value)) < 1000


def test_a_model_without_loras_says_so(admission: Admission) -> None:
    with pytest.raises(LoraNotAllowed, match="Allowed: none declared by its profiles; or a LoRA folder"):
        admit(admission, "sentence-transformers/all-MiniLM-L6-v2", "org/x")


# -- Loras: failures remembered, bounded, told by class --------------------------------------------


@pytest.fixture(scope="module")
def encoder(minilm_dir: Path) -> TorchDenseEncoder:
    return TorchDenseEncoder.load(LoadSpec(minilm_dir, "cpu", ComputePrecision.FLOAT32, 64))


@pytest.fixture
def device() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(1) as executor:
        yield executor


async def settle(model: str) -> None:
    """Wait for every LoRA load of ``model`` under way (each runs as a task named for it)."""
    loads = [t for t in asyncio.all_tasks() if (t.get_name() or "").startswith(f"lora:{model}:")]
    await asyncio.gather(*loads)


def ask(loras: Loras, name: str) -> None:
    with loras.using(name):
        pass


async def test_failed_loads_are_remembered_up_to_a_bound_the_oldest_forgotten_first(
    encoder: TorchDenseEncoder, device: ThreadPoolExecutor, tmp_path: Path
) -> None:
    def locate(name: str) -> Path:  # an empty folder: no PEFT adapter in it
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        return folder

    loras = Loras("m", encoder, 2, locate, device)
    names = [f"bad-{i}" for i in range(MAX_FAILED_LORAS + 6)]
    for name in names:
        with pytest.raises(LoraLoading):
            ask(loras, name)
    await settle("m")
    for name in names[-MAX_FAILED_LORAS:]:  # remembered: told at once, by class, without the folder
        with pytest.raises(InvalidInput) as caught:
            ask(loras, name)
        assert str(caught.value) == (
            f"LoRA '{name}' for model 'm' failed to load (CONFIG): its configuration does not fit its "
            "weights or its adapter. The server's log has the detail."
        )
    for name in names[:6]:  # forgotten: asked again, loaded anew
        with pytest.raises(LoraLoading):
            ask(loras, name)
    await settle("m")
    loras.close()


async def test_a_lora_that_loads_is_kept_and_used(
    encoder: TorchDenseEncoder, device: ThreadPoolExecutor, minilm_dir: Path, tmp_path: Path
) -> None:
    folder = builders.lora(minilm_dir, tmp_path / "qv", 1, ["query", "value"])
    loras = Loras("m2", encoder, 2, lambda name: folder, device)
    with pytest.raises(LoraLoading):
        ask(loras, "qv")
    await settle("m2")
    with loras.using("qv") as held:
        assert held == "qv"
    assert loras.loaded() == ["qv"]
    loras.close()
