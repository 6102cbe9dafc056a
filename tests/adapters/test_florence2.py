"""Florence-2 against transformers' native model and processor (the model card's recipe:
processor, ``generate``, ``post_process_generation``) on the same weights, built from a config
(tests/builders.py) and saved both as microsoft/Florence-2-* publish it and as transformers does."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from transformers import AutoProcessor, Florence2ForConditionalGeneration

from sie.adapters.batch import ImageData
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.florence2 import DOCVQA, GROUNDING, Florence2Extractor, extraction_of, reading
from sie.adapters.florence2.layout import native_state_dict
from sie.core.extraction import DetectedObject, Entity
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.conftest import random_png

IMAGES = [random_png(50, 70, seed) for seed in range(4)] + [random_png(200, 90, 9)]
NEW_TOKENS = 16
TASKS = ["<OD>", "<OCR>", "<OCR_WITH_REGION>", "<CAPTION>"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return builders.florence2(tmp_path_factory.mktemp("florence2"))


@pytest.fixture(scope="module")
def reference(folders: tuple[Path, Path]) -> tuple[Any, Any]:
    native = str(folders[1])
    model: Any = Florence2ForConditionalGeneration.from_pretrained(native).eval()
    return model, AutoProcessor.from_pretrained(native)


def extractor_of(folder: Path) -> Florence2Extractor:
    return Florence2Extractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 64))


@pytest.fixture(scope="module")
def hub(folders: tuple[Path, Path]) -> Florence2Extractor:
    return extractor_of(folders[0])


def forward(task: str, labels: list[str] | None = None, instruction: str | None = None) -> Forward:
    options = {"task": task, "max_new_tokens": NEW_TOKENS, "num_beams": 1}
    return Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels or [], options, instruction))


def model_card(reference: tuple[Any, Any], image: bytes, prompt: str, task: str) -> dict[str, Any]:
    """What the Hub code generates with (its text config's ``no_repeat_ngram_size``), parsed."""
    model, processor = reference
    picture = Image.open(io.BytesIO(image)).convert("RGB")
    inputs = processor(text=prompt, images=picture, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(
            **inputs, max_new_tokens=NEW_TOKENS, num_beams=1, do_sample=False, no_repeat_ngram_size=3
        )
    text = processor.batch_decode(out, skip_special_tokens=False)[0]
    parsed: dict[str, Any] = processor.post_process_generation(text, task=task, image_size=picture.size)
    return parsed


def test_the_hub_checkpoint_converts_to_the_native_weights(
    hub: Florence2Extractor, reference: tuple[Any, Any]
) -> None:
    ours, theirs = hub.model.state_dict(), reference[0].state_dict()
    assert ours.keys() == theirs.keys()
    for key, tensor in theirs.items():
        assert torch.equal(ours[key], tensor), key


@pytest.mark.parametrize("layout", ["hub", "native"])
def test_each_task_reads_as_the_model_card(
    layout: str, folders: tuple[Path, Path], hub: Florence2Extractor, reference: tuple[Any, Any]
) -> None:
    extractor = hub if layout == "hub" else extractor_of(folders[1])
    readings = set()
    for task in TASKS:
        ask = forward(task)
        out = extractor.run(extractor.prepare([ImageData(i, "png") for i in IMAGES], ask), ask).extractions
        assert out is not None
        for image, got in zip(IMAGES, out, strict=True):
            expected = model_card(reference, image, task, task)
            assert got.data == expected
            readings.add(repr(expected))
    assert len(readings) > len(TASKS)  # pages read differently, so equality is not one constant


def test_an_item_alone_reads_as_in_a_batch(hub: Florence2Extractor) -> None:
    ask = forward("<OCR_WITH_REGION>")
    batch = hub.run(hub.prepare([ImageData(i, "png") for i in IMAGES], ask), ask).extractions
    assert batch is not None
    for index, image in enumerate(IMAGES):
        alone = hub.run(hub.prepare([ImageData(image, "png")], ask), ask).extractions
        assert alone is not None and alone[0] == batch[index]


def test_an_instruction_is_a_docvqa_question_unless_it_names_a_task(
    hub: Florence2Extractor, reference: tuple[Any, Any]
) -> None:
    image = IMAGES[0]
    question = forward("<OD>", instruction="what is the total")
    got = hub.run(hub.prepare([ImageData(image, "png")], question), question).extractions
    assert got is not None
    assert got[0].data == model_card(reference, image, DOCVQA + "what is the total", DOCVQA)
    caption = forward("<OD>", instruction=" <CAPTION> ")
    got = hub.run(hub.prepare([ImageData(image, "png")], caption), caption).extractions
    assert got is not None and set(got[0].data) == {"<CAPTION>"}
    grounding = forward(GROUNDING, labels=["a dog", "a cat"])
    got = hub.run(hub.prepare([ImageData(image, "png")], grounding), grounding).extractions
    assert got is not None
    assert got[0].data == model_card(reference, image, GROUNDING + "a dog, a cat", GROUNDING)


def test_readings_become_the_public_entities_and_objects() -> None:
    boxes = {"bboxes": [[10.0, 20.0, 30.0, 60.0]], "labels": [""]}
    assert extraction_of("<OD>", boxes).objects == [DetectedObject("object", 1.0, [10, 20, 20, 40])]
    region = {"quad_boxes": [[5, 6, 25, 6, 25, 16, 5, 16]], "labels": ["TOTAL"]}
    assert extraction_of("<OCR_WITH_REGION>", region).entities == [
        Entity("TOTAL", "text", 1.0, bbox=[5, 6, 20, 10])
    ]
    assert extraction_of("<CAPTION>", " a dog ").entities == [Entity("a dog", "caption", 1.0)]
    assert extraction_of(DOCVQA, "6.00").entities == [Entity("6.00", "answer", 1.0)]
    assert extraction_of("<OCR>", "").entities == []
    grounded = extraction_of(GROUNDING, {"bboxes": [[1, 2, 3, 4]], "labels": ["a dog"]})
    assert grounded.objects == [DetectedObject("a dog", 1.0, [1, 2, 2, 2])]
    assert grounded.data == {GROUNDING: {"bboxes": [[1, 2, 3, 4]], "labels": ["a dog"]}}
    reversed_corners = extraction_of("<OD>", {"bboxes": [[30, 60, 10, 20]], "labels": ["car"]})
    assert reversed_corners.objects == [DetectedObject("car", 1.0, [10, 20, 20, 40])]


def test_bad_requests_are_refused_by_name(hub: Florence2Extractor) -> None:
    image = [ImageData(IMAGES[0], "png")]
    with pytest.raises(UnsupportedInput, match="image"):
        hub.prepare(["a page"], forward("<OD>"))
    with pytest.raises(UnsupportedInput, match="'task' must be one of"):
        hub.prepare(image, forward("<DETECT>"))
    with pytest.raises(UnsupportedInput, match="Florence-2 option 'max_new_tokens'"):
        bad = Task.of([], {"task": "<OD>", "max_new_tokens": 0})
        hub.prepare(image, Forward(frozenset({Capability.EXTRACT}), task=bad))
    with pytest.raises(UnsupportedInput, match="only content"):
        hub.prepare(image, forward("<OD>", instruction="<OD> and more"))
    with pytest.raises(UnsupportedInput, match="positions"):
        hub.prepare(image, forward("<OD>", instruction="total " * 200))
    with pytest.raises(UnsupportedInput, match="placeholder"):
        hub.prepare(image, forward("<OD>", instruction="what is <pad> here"))
    with pytest.raises(UnsupportedInput, match="placeholder"):
        hub.prepare(image, forward(GROUNDING, labels=["a dog", "<pad>"]))
    with pytest.raises(UnsupportedInput, match="'num_beams' must be an integer from 1 to 16"):
        wide = Task.of([], {"task": "<OD>", "num_beams": 2**40})
        hub.prepare(image, Forward(frozenset({Capability.EXTRACT}), task=wide))


def test_a_reading_the_parse_cannot_take_is_answered_as_its_text(reference: tuple[Any, Any]) -> None:
    processor = reference[1]
    text = "</s><s>a car<loc_99999999999999999999><loc_2><loc_3><loc_4></s>"
    got = reading(processor, text, "<OD>", (100, 80))
    assert got.objects == [] and got.data == {"<OD>": "a car<loc_99999999999999999999><loc_2><loc_3><loc_4>"}
    boxes = reading(processor, "</s><s>a car<loc_100><loc_200><loc_300><loc_400></s>", "<OD>", (1000, 1000))
    assert boxes.objects == [DetectedObject("a car", 1.0, [100, 200, 200, 200])]


def test_a_checkpoint_that_keeps_one_tied_embedding_loads(
    folders: tuple[Path, Path], reference: tuple[Any, Any], tmp_path: Path
) -> None:
    """The shared embedding, the encoder's, the decoder's and the output layer are one tensor; a
    checkpoint that stores only the output layer's copy is whole."""
    import shutil

    shutil.copytree(folders[0], tmp_path / "hub")
    state = torch.load(tmp_path / "hub" / "pytorch_model.bin", weights_only=True)
    for key in ("shared", "encoder.embed_tokens", "decoder.embed_tokens"):
        del state[f"language_model.model.{key}.weight"]
    torch.save(state, tmp_path / "hub" / "pytorch_model.bin")
    ours = extractor_of(tmp_path / "hub").model.state_dict()
    for key, tensor in reference[0].state_dict().items():
        assert torch.equal(ours[key], tensor), key


def test_a_checkpoint_that_does_not_fit_is_refused() -> None:
    with pytest.raises(ValueError, match="no place in the model"):
        native_state_dict({"vision_tower.extra.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="final_logits_bias"):
        native_state_dict({"language_model.final_logits_bias": torch.ones(1, 4)})
    renamed = native_state_dict(
        {"language_model.final_logits_bias": torch.zeros(1, 4), "image_projection": torch.ones(2, 3)}
    )
    assert list(renamed) == ["model.multi_modal_projector.image_projection.weight"]
    assert renamed["model.multi_modal_projector.image_projection.weight"].shape == (3, 2)


def test_an_item_bills_its_prompt_not_the_image_placeholders(
    hub: Florence2Extractor, reference: tuple[Any, Any]
) -> None:
    """``usage``: a row is the image's placeholders then the prompt between its start and end tokens;
    the item bills the prompt's tokens as the tokenizer gives them alone, the image on ``images``."""
    _, processor = reference
    for task in ("<OCR>", "<CAPTION>"):
        prepared = hub.prepare([ImageData(i, "png") for i in IMAGES[:2]], forward(task))
        tokenizer = processor.tokenizer
        prompt = tokenizer(processor.task_prompts_without_inputs[task], add_special_tokens=False)["input_ids"]
        text = [tokenizer.bos_token_id, *prompt, tokenizer.eos_token_id]
        assert [item.input_tokens for item in prepared] == [len(text)] * 2
        for item in prepared:
            assert item.ids.tolist() == [processor.image_token_id] * processor.num_image_tokens + text
