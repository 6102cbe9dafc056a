"""ColPali against transformers' own ``ColPaliForRetrieval`` and ``ColPaliProcessor`` on the same
weights (a tiny PaliGemma built from a config, tests/builders.py): page images and text queries each
alone through the processor, as the public server encodes them, equal ours in mixed batches; and
MaxSim over them ranks as the processor's ``score_retrieval``."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoTokenizer, ColPaliForRetrieval, ColPaliProcessor, SiglipImageProcessorPil

from sie.adapters.batch import ImageData
from sie.adapters.colpali import ColPaliEncoder
from sie.adapters.contract import Forward, LoadSpec
from sie.core.options import Capability, ComputePrecision, OverflowPolicy
from sie.postprocess.similarity import maxsim
from tests import builders
from tests.conftest import random_png

QUERIES = ["what is the revenue", "a much longer question about the quarterly results of the company", "ok"]


PAGES = [random_png(48, 64, 0), random_png(64, 40, 1), random_png(32, 32, 2)]
MULTI = Forward(frozenset({Capability.MULTIVECTOR}))


@pytest.fixture(scope="module")
def folder(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.colpali(splade_dir, tmp_path_factory.mktemp("colpali"))


@pytest.fixture(scope="module")
def encoder(folder: Path) -> ColPaliEncoder:
    return ColPaliEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512))


@pytest.fixture(scope="module")
def reference(folder: Path) -> tuple[ColPaliForRetrieval, ColPaliProcessor]:
    processor = ColPaliProcessor(
        image_processor=SiglipImageProcessorPil.from_pretrained(str(folder)),
        tokenizer=AutoTokenizer.from_pretrained(str(folder)),
    )
    return ColPaliForRetrieval.from_pretrained(str(folder), dtype=torch.float32).eval(), processor


def alone(reference: tuple[ColPaliForRetrieval, ColPaliProcessor], one: str | bytes) -> np.ndarray:
    model, processor = reference
    if isinstance(one, str):
        encoded = processor(text=[one], return_tensors="pt")
    else:
        encoded = processor(images=[Image.open(io.BytesIO(one)).convert("RGB")], return_tensors="pt")
    with torch.no_grad():
        embeddings = model(**{k: v for k, v in encoded.items() if k != "labels"}).embeddings
    return embeddings[0].numpy()


def test_pages_and_queries_in_one_batch_equal_each_alone_through_transformers(
    encoder: ColPaliEncoder, reference: tuple[ColPaliForRetrieval, ColPaliProcessor]
) -> None:
    inputs = [ImageData(PAGES[0], "png"), QUERIES[0], ImageData(PAGES[1], "png"), QUERIES[1], QUERIES[2]]
    ours = encoder.run(encoder.prepare(inputs, MULTI), MULTI).multivector
    assert ours is not None and len(ours) == len(inputs)
    for got, one in zip(ours, [PAGES[0], QUERIES[0], PAGES[1], QUERIES[1], QUERIES[2]], strict=True):
        want = alone(reference, one)
        assert got.shape == want.shape and got.shape[1] == encoder.dims[Capability.MULTIVECTOR] == 16
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert ours[0].shape[0] > 16  # every patch and the prompt's tokens


def test_maxsim_ranks_pages_as_the_processors_score_retrieval(
    encoder: ColPaliEncoder, reference: tuple[ColPaliForRetrieval, ColPaliProcessor]
) -> None:
    _, processor = reference
    pages = encoder.run(encoder.prepare([ImageData(p, "png") for p in PAGES], MULTI), MULTI).multivector
    query = encoder.run(encoder.prepare(QUERIES[:1], MULTI), MULTI).multivector
    assert pages is not None and query is not None
    ours = maxsim(query[0], pages)
    theirs = processor.score_retrieval([torch.from_numpy(query[0])], [torch.from_numpy(p) for p in pages])[0]
    np.testing.assert_allclose(
        ours * len(query[0]), theirs.numpy(), rtol=1e-5
    )  # ours averages over query tokens


def test_overflow_policy_error_refuses_a_query_past_the_length(
    encoder: ColPaliEncoder, reference: tuple[ColPaliForRetrieval, ColPaliProcessor]
) -> None:
    """``error`` refuses the long query alone, counted whole with its prompt as the processor lays it
    out; ``truncate_text`` encodes what ``default`` encodes (the query cut to fit)."""
    _, processor = reference
    long = "the quarterly revenue " * 300
    tokens = len(processor(text=[long], return_tensors="pt")["input_ids"][0])
    assert tokens > 512
    inputs: list[str | ImageData] = [QUERIES[0], long, ImageData(PAGES[0], "png")]
    error, truncate = (
        replace(MULTI, overflow=p) for p in (OverflowPolicy.ERROR, OverflowPolicy.TRUNCATE_TEXT)
    )
    refused = encoder.prepare(inputs, error)
    assert [item.error is None for item in refused] == [True, False, True]
    assert refused[1].error is not None and refused[1].error.code == "INPUT_TOO_LONG"
    assert refused[1].error.message.startswith(
        f"The input takes {tokens} tokens, past the model's 512-token window"
    )
    by_default = encoder.run(encoder.prepare(inputs, MULTI), MULTI).multivector or []
    truncated = encoder.run(encoder.prepare(inputs, truncate), truncate).multivector or []
    assert len(by_default) == len(truncated) == 3 and len(by_default[1]) <= 512
    for ours, theirs in zip(truncated, by_default, strict=True):
        np.testing.assert_array_equal(ours, theirs)
