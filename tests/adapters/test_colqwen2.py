"""ColQwen2.5 against colpali-engine's own ``ColQwen2_5``, loaded as the public server and the model
card load it: ``from_pretrained`` on the LoRA folder, which transformers' PEFT integration resolves to
the base and colpali-engine's key mapping reads under the older names (tests/builders.py builds both
folders in ``vidore/colqwen2.5-v0.2``'s layout). Inputs go through transformers' Qwen2-VL processor
with colpali-engine's prompts, each item alone; ours, with the LoRA merged, must equal them in mixed
batches."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import io
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

from sie.adapters.batch import ImageData
from sie.adapters.colqwen2 import (
    MAX_PIXELS,
    MIN_PIXELS,
    QUERY_SUFFIX,
    VISUAL_PROMPT,
    ColQwen2Encoder,
    pages_processor,
)
from sie.adapters.contract import Forward, LoadSpec
from sie.core.options import Capability, ComputePrecision, OverflowPolicy
from sie.core.task import UnsupportedInput
from tests import builders
from tests.conftest import random_png

QUERIES = ["what is the revenue", "a much longer question about the quarterly results of the company", "ok"]
# Under, inside and over the public page bounds (256 and 768 merged patches).
PAGES = [random_png(300, 420, 0), random_png(900, 500, 1), random_png(64, 64, 2), random_png(1800, 1400, 3)]
MULTI = Forward(frozenset({Capability.MULTIVECTOR}))


@pytest.fixture(scope="module")
def folders(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return builders.colqwen2_5(splade_dir, tmp_path_factory.mktemp("colqwen2.5"))


def spec(folders: tuple[Path, Path], adapter: Path | None = None) -> LoadSpec:
    lora, base = folders

    def fetch(hf_id: str, revision: str | None, path: str | None) -> Path:
        assert (hf_id, revision, path) == (builders.COLQWEN_BASE, None, None)
        return base

    return LoadSpec(adapter or lora, "cpu", ComputePrecision.FLOAT32, 2048, fetch=fetch)


@pytest.fixture(scope="module")
def encoder(folders: tuple[Path, Path]) -> ColQwen2Encoder:
    return ColQwen2Encoder.load(spec(folders))


@pytest.fixture(scope="module")
def reference(folders: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """colpali-engine's model from the LoRA folder (its base pointed at the local folder, as the Hub id
    cannot be fetched here), and the processor colpali-engine's ``ColQwen2_5_Processor`` is: Qwen2-VL's,
    left padding, with the public server's page size bounds."""
    lora, base = folders
    local = tmp_path_factory.mktemp("colqwen-reference") / "adapter"
    shutil.copytree(lora, local)
    config = json.loads((local / "adapter_config.json").read_text())
    (local / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(base)}))
    model = builders.colpali_engine_colqwen2_5().from_pretrained(str(local), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(lora))
    tokenizer.padding_side = "left"
    images = Qwen2VLImageProcessorPil.from_pretrained(str(lora), min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    return model, pages_processor(images, tokenizer)


def colpali_engine_class_attributes(path: str, name: str) -> dict[str, str]:
    """The literal class attributes of a colpali-engine processor class, read from its source under
    ``colpali_engine/models`` (the processor modules import transformers' torchvision image
    processors, so they cannot be imported here)."""
    found = importlib.util.find_spec("colpali_engine")
    assert found is not None and found.submodule_search_locations
    source = Path(next(iter(found.submodule_search_locations))) / "models" / path
    (processor,) = (
        node
        for node in ast.parse(source.read_text()).body
        if isinstance(node, ast.ClassDef) and node.name == name
    )
    return {
        node.target.id: ast.literal_eval(node.value)
        for node in processor.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None
    }


def test_the_prompts_are_colpali_engines() -> None:
    prompts = colpali_engine_class_attributes(
        "qwen2_5/colqwen2_5/processing_colqwen2_5.py", "ColQwen2_5_Processor"
    )
    assert prompts["visual_prompt_prefix"] == VISUAL_PROMPT
    assert prompts["query_augmentation_token"] * 10 == QUERY_SUFFIX  # process_queries' default suffix


def alone(reference: tuple[Any, Any], one: str | bytes) -> np.ndarray:
    model, processor = reference
    if isinstance(one, str):
        encoded = processor(text=[one + QUERY_SUFFIX], padding="longest", return_tensors="pt")
    else:
        page = Image.open(io.BytesIO(one)).convert("RGB")
        encoded = processor(text=[VISUAL_PROMPT], images=[page], padding="longest", return_tensors="pt")
        encoded["pixel_values"] = encoded["pixel_values"].unsqueeze(0)  # colpali-engine pads per page
    with torch.no_grad():
        embeddings = model(**encoded)
    return embeddings[0].numpy()


def test_pages_and_queries_in_one_batch_equal_each_alone_through_colpali_engine(
    encoder: ColQwen2Encoder, reference: tuple[Any, Any]
) -> None:
    inputs = [ImageData(PAGES[0], "png"), QUERIES[0], ImageData(PAGES[1], "png"), QUERIES[1], QUERIES[2]]
    inputs += [ImageData(PAGES[2], "png"), ImageData(PAGES[3], "png")]
    prepared = encoder.prepare(inputs, MULTI)
    ours = encoder.run(prepared, MULTI).multivector
    items = [PAGES[0], QUERIES[0], PAGES[1], QUERIES[1], QUERIES[2], PAGES[2], PAGES[3]]
    assert ours is not None and len(ours) == len(items)
    for got, one in zip(ours, items, strict=True):
        want = alone(reference, one)
        assert got.shape == want.shape and got.shape[1] == encoder.dims[Capability.MULTIVECTOR] == 128
        np.testing.assert_allclose(got, want, atol=2e-5)
    # A page is every merged patch (256 to 768, the public bounds) and its prompt's tokens: what
    # prepare charged it against the batch's token budget.
    for row in (0, 2, 5, 6):
        assert prepared[row].weight == ours[row].shape[0]
    assert ours[0].shape[0] > 256 and ours[2].shape[0] > ours[0].shape[0]
    prompt = ours[5].shape[0] - 256  # the smallest page is resized up to the floor
    assert prompt > 0 and 700 < ours[6].shape[0] - prompt <= 768


def test_a_lora_that_does_not_fit_its_base_fails_the_load(folders: tuple[Path, Path], tmp_path: Path) -> None:
    lora, _ = folders
    broken = tmp_path / "broken"
    shutil.copytree(lora, broken)
    weights = load_file(str(broken / "adapter_model.safetensors"))
    weights["base_model.model.model.layers.9.mlp.up_proj.lora_A.weight"] = torch.zeros(4, 64)
    save_file(weights, str(broken / "adapter_model.safetensors"))
    with pytest.raises(ValueError, match="does not fit its base"):
        ColQwen2Encoder.load(spec(folders, broken))


@pytest.fixture(scope="module")
def short(folders: tuple[Path, Path]) -> ColQwen2Encoder:
    return ColQwen2Encoder.load(dataclasses.replace(spec(folders), max_seq_length=48))


def test_a_text_over_the_length_is_cut_to_fit_with_its_suffix(
    short: ColQwen2Encoder, reference: tuple[Any, Any]
) -> None:
    long_text = " ".join(f"word{i}" for i in range(3000))
    (prepared,) = short.prepare([long_text], MULTI)
    (vectors,) = short.run([prepared], MULTI).multivector or []
    assert vectors.shape[0] == len(prepared.ids) == 48
    cut = str(prepared.payload).removesuffix(QUERY_SUFFIX)
    assert long_text.startswith(cut) and len(cut) < len(long_text)
    np.testing.assert_allclose(vectors, alone(reference, cut), atol=2e-5)


def test_overflow_policy_error_refuses_a_query_past_the_length(
    short: ColQwen2Encoder, reference: tuple[Any, Any]
) -> None:
    """``error`` refuses the long query alone, counted whole with its suffix as the processor lays it
    out; ``truncate_text`` encodes what ``default`` encodes (the query cut to fit with its suffix)."""
    _, processor = reference
    long = " ".join(f"word{i}" for i in range(60))
    tokens = len(processor(text=[long + QUERY_SUFFIX], return_tensors="pt")["input_ids"][0])
    assert tokens > 48
    inputs = [QUERIES[2], long]
    error, truncate = (
        dataclasses.replace(MULTI, overflow=p) for p in (OverflowPolicy.ERROR, OverflowPolicy.TRUNCATE_TEXT)
    )
    refused = short.prepare(inputs, error)
    assert refused[0].error is None
    assert refused[1].error is not None and refused[1].error.code == "INPUT_TOO_LONG"
    assert refused[1].error.message.startswith(
        f"The input takes {tokens} tokens, past the model's 48-token window"
    )
    by_default = short.run(short.prepare(inputs, MULTI), MULTI).multivector or []
    truncated = short.run(short.prepare(inputs, truncate), truncate).multivector or []
    assert len(by_default) == len(truncated) == 2 and len(by_default[1]) == 48
    for ours, theirs in zip(truncated, by_default, strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_a_page_too_narrow_for_the_processor_is_refused_before_the_batch(encoder: ColQwen2Encoder) -> None:
    with pytest.raises(UnsupportedInput, match="at most 200 times"):
        encoder.prepare([ImageData(random_png(3000, 10, 4), "png")], MULTI)


def test_tokenizing_and_encoding_at_once_from_several_threads_fails_nothing(encoder: ColQwen2Encoder) -> None:
    """``prepare`` runs on the tokenizing threads while a batch runs: the shared fast tokenizer must
    not be reconfigured under either (unguarded, the batch's padding is lost and it fails)."""
    texts = ["word " * n for n in range(1, 200, 9)]
    errors: list[BaseException] = []

    def keep(work: Any, times: int) -> None:
        try:
            for _ in range(times):
                work()
        except BaseException as error:
            errors.append(error)

    batch = encoder.prepare(texts, MULTI)
    threads = [threading.Thread(target=keep, args=(lambda: encoder.run(batch, MULTI), 60))]
    threads += [
        threading.Thread(target=keep, args=(lambda part=part: encoder.prepare(part, MULTI), 1500))
        for part in (texts[:3], texts[3:6])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
