"""Donut against its model card's recipe on transformers (``DonutProcessor`` + ``generate`` +
``token2json``) on the same weights, built from configs (tests/builders.py)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from transformers import DonutProcessor, VisionEncoderDecoderModel

from sie.adapters.batch import ImageData
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.donut import CORD, DOCVQA, DonutExtractor, entities_of
from sie.core.extraction import Entity
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.conftest import random_png

IMAGES = [random_png(50, 70, seed) for seed in range(4)] + [random_png(200, 90, 9)]
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, splade_dir: Path) -> Path:
    return builders.donut(splade_dir, tmp_path_factory.mktemp("donut"))


@pytest.fixture(scope="module")
def extractor(folder: Path) -> DonutExtractor:
    return DonutExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 64))


def forward(task: str, instruction: str | None = None) -> Forward:
    options = {"task": task, "max_new_tokens": NEW_TOKENS, "num_beams": 1}
    return Forward(frozenset({Capability.EXTRACT}), task=Task.of([], options, instruction))


def model_card(folder: Path, image: bytes, prompt: str) -> tuple[dict[str, Any], str]:
    """The model card's recipe, verbatim in substance: what the reading parses to, and the reading."""
    processor: Any = DonutProcessor.from_pretrained(str(folder))
    model: Any = VisionEncoderDecoderModel.from_pretrained(str(folder)).eval()
    pixels = processor(Image.open(io.BytesIO(image)).convert("RGB"), return_tensors="pt").pixel_values
    ids = processor.tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(
            pixels,
            decoder_input_ids=ids,
            max_new_tokens=NEW_TOKENS,
            pad_token_id=processor.tokenizer.pad_token_id,
            eos_token_id=processor.tokenizer.eos_token_id,
            bad_words_ids=[[processor.tokenizer.unk_token_id]],
        )
    text = processor.batch_decode(out)[0]
    text = text.replace(processor.tokenizer.eos_token, "").replace(processor.tokenizer.pad_token, "")
    text = re.sub(r"<.*?>", "", text, count=1).strip()
    return processor.token2json(text), text


def test_a_receipt_reading_equals_the_model_card(folder: Path, extractor: DonutExtractor) -> None:
    cord = forward(CORD)
    out = extractor.run(extractor.prepare([ImageData(i, "png") for i in IMAGES], cord), cord).extractions
    assert out is not None
    readings = set()
    for image, got in zip(IMAGES, out, strict=True):
        expected, text = model_card(folder, image, CORD)
        assert got.data == expected
        readings.add(text)
    assert len(readings) > 1  # the pages are read differently, so equality is not one constant


def test_a_docvqa_question_follows_the_task_tag(folder: Path, extractor: DonutExtractor) -> None:
    question = "what is the total"
    ask = forward(DOCVQA, question)
    prepared = extractor.prepare([ImageData(IMAGES[0], "png")], ask)
    tokenizer: Any = DonutProcessor.from_pretrained(str(folder)).tokenizer
    expected_prompt = f"{DOCVQA}<s_question>{question}</s_question><s_answer>"
    assert prepared[0].ids.tolist() == tokenizer(expected_prompt, add_special_tokens=False).input_ids
    out = extractor.run(prepared, ask).extractions
    assert out is not None and out[0].data == model_card(folder, IMAGES[0], expected_prompt)[0]


def test_an_item_alone_reads_as_in_a_batch(extractor: DonutExtractor) -> None:
    cord = forward(CORD)
    batch = extractor.run(extractor.prepare([ImageData(i, "png") for i in IMAGES], cord), cord).extractions
    assert batch is not None
    for index, image in enumerate(IMAGES):
        alone = extractor.run(extractor.prepare([ImageData(image, "png")], cord), cord).extractions
        assert alone is not None and alone[0] == batch[index]


def test_entities_repeat_the_reading_as_the_public_server_lists_it() -> None:
    receipt = {"menu": [{"nm": "Latte", "price": "4.50"}, {"nm": "Bagel"}], "total": {"total_price": "6.00"}}
    assert entities_of(receipt, CORD) == [
        Entity("Latte", "menu[0].nm", 1.0),
        Entity("4.50", "menu[0].price", 1.0),
        Entity("Bagel", "menu[1].nm", 1.0),
        Entity("6.00", "total.total_price", 1.0),
    ]
    assert entities_of({"answer": "6.00"}, DOCVQA) == [Entity("6.00", "answer", 1.0)]
    assert entities_of({}, DOCVQA) == []


def test_text_items_and_bad_options_are_refused(extractor: DonutExtractor) -> None:
    with pytest.raises(UnsupportedInput, match="image"):
        extractor.prepare(["a receipt"], forward(CORD))
    bad = Forward(frozenset({Capability.EXTRACT}), task=Task.of([], {"task": CORD, "max_new_tokens": 0}))
    with pytest.raises(UnsupportedInput, match="max_new_tokens"):
        extractor.prepare([ImageData(IMAGES[0], "png")], bad)
    with pytest.raises(UnsupportedInput, match="task tag"):
        extractor.prepare([ImageData(IMAGES[0], "png")], forward("receipt"))


def test_an_item_bills_its_decoder_prompt_not_its_patches(folder: Path, extractor: DonutExtractor) -> None:
    """``usage``: each page bills the prompt the decoder starts from (the task tag, a DocVQA question
    in its tags) as the processor's tokenizer gives it; the page bills on ``images``."""
    tokenizer = DonutProcessor.from_pretrained(str(folder)).tokenizer
    asked = forward(DOCVQA, "what is the total amount due")
    for ask in (forward(CORD), asked):
        prepared = extractor.prepare([ImageData(i, "png") for i in IMAGES[:2]], ask)
        prompt = tokenizer.decode(prepared[0].ids)
        assert [item.input_tokens for item in prepared] == [len(prepared[0].ids)] * 2
        assert len(tokenizer(prompt, add_special_tokens=False).input_ids) == len(prepared[0].ids)
    questioned = extractor.prepare([ImageData(IMAGES[0], "png")], asked)[0]
    question = len(tokenizer("what is the total amount due", add_special_tokens=False).input_ids)
    assert questioned.input_tokens > question and questioned.cost != questioned.input_tokens
