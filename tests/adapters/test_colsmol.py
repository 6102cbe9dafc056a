"""ColSmol against colpali-engine's own ``ColIdefics3`` with the LoRA applied by peft, as the public
server loads it (``PeftModel.from_pretrained`` over the base, tests/builders.py builds both folders in
``vidore/colSmol-256M``'s layout). Inputs go through transformers' Idefics3 processor with
colpali-engine's prompts, each item alone; ours, with the LoRA merged, must equal them in mixed
batches, and a page's cost must be the positions it gets."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from peft import PeftModel
from PIL import Image
from transformers import AutoTokenizer, Idefics3Processor
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from sie.adapters.batch import ImageData
from sie.adapters.colsmol import QUERY_SUFFIX, VISUAL_PROMPT, ColSmolEncoder
from sie.adapters.contract import Forward, LoadSpec
from sie.core.options import Capability, ComputePrecision
from tests import builders
from tests.adapters.test_colqwen2 import colpali_engine_class_attributes
from tests.conftest import random_png

QUERIES = ["what is the revenue", "a much longer question about the quarterly results of the company", "ok"]
# The processor resizes a page's longest side to 64 pixels and splits it into 32-pixel tiles: a square
# and a portrait page become 2x2 tiles, a wide one a row of two.
PAGES = [random_png(20, 20, 0), random_png(120, 40, 1), random_png(300, 420, 2)]
MULTI = Forward(frozenset({Capability.MULTIVECTOR}))


@pytest.fixture(scope="module")
def folders(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return builders.colsmol(splade_dir, tmp_path_factory.mktemp("colsmol"))


def spec(folders: tuple[Path, Path]) -> LoadSpec:
    lora, base = folders

    def fetch(hf_id: str, revision: str | None, path: str | None) -> Path:
        assert (hf_id, revision, path) == (builders.COLSMOL_BASE, None, None)
        return base

    return LoadSpec(lora, "cpu", ComputePrecision.FLOAT32, 2048, fetch=fetch)


@pytest.fixture(scope="module")
def encoder(folders: tuple[Path, Path]) -> ColSmolEncoder:
    return ColSmolEncoder.load(spec(folders))


@pytest.fixture(scope="module")
def reference(folders: tuple[Path, Path]) -> tuple[Any, Any]:
    """colpali-engine's model from the base with peft's LoRA over it, unmerged, and the processor
    colpali-engine's ``ColIdefics3Processor`` is: Idefics3's, left padding, the saved settings."""
    lora, base = folders
    model_class = builders.colpali_engine_module(
        "idefics3/colidefics3/modeling_colidefics3.py", "ColIdefics3"
    )
    model = PeftModel.from_pretrained(model_class.from_pretrained(str(base), dtype=torch.float32), str(lora))
    tokenizer = AutoTokenizer.from_pretrained(str(lora))
    tokenizer.padding_side = "left"
    images = Idefics3ImageProcessorPil.from_pretrained(str(lora))
    return model.eval(), Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=4)


def test_the_prompts_are_colpali_engines() -> None:
    prompts = colpali_engine_class_attributes(
        "idefics3/colidefics3/processing_colidefics3.py", "ColIdefics3Processor"
    )
    assert prompts["visual_prompt_prefix"] == VISUAL_PROMPT
    assert prompts["query_augmentation_token"] * 10 == QUERY_SUFFIX


def alone(reference: tuple[Any, Any], one: str | bytes) -> np.ndarray:
    model, processor = reference
    if isinstance(one, str):
        encoded = processor(text=[one + QUERY_SUFFIX], padding="longest", return_tensors="pt")
    else:
        page = Image.open(io.BytesIO(one)).convert("RGB")
        encoded = processor(text=[VISUAL_PROMPT], images=[page], padding="longest", return_tensors="pt")
    with torch.no_grad():
        embeddings = model(**encoded)
    return embeddings[0].numpy()


def test_pages_and_queries_in_one_batch_equal_each_alone_through_colpali_engine(
    encoder: ColSmolEncoder, reference: tuple[Any, Any]
) -> None:
    inputs = [ImageData(PAGES[0], "png"), QUERIES[0], ImageData(PAGES[1], "png"), QUERIES[1], QUERIES[2]]
    inputs.append(ImageData(PAGES[2], "png"))
    prepared = encoder.prepare(inputs, MULTI)
    ours = encoder.run(prepared, MULTI).multivector
    items = [PAGES[0], QUERIES[0], PAGES[1], QUERIES[1], QUERIES[2], PAGES[2]]
    assert ours is not None and len(ours) == len(items)
    for got, one in zip(ours, items, strict=True):
        want = alone(reference, one)
        assert got.shape == want.shape and got.shape[1] == encoder.dims[Capability.MULTIVECTOR] == 128
        np.testing.assert_allclose(got, want, atol=2e-5)
    # The processor's count of a split page includes the newline between its tile rows and the whole
    # page; the test's BERT tokenizer drops whitespace, so that one token is not there.
    for row in (0, 2, 5):
        assert 0 <= (prepared[row].weight or 0) - ours[row].shape[0] <= 1
    assert ours[2].shape[0] < ours[0].shape[0] == ours[5].shape[0]  # fewer tiles, fewer positions
