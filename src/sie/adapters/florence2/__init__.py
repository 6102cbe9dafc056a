"""Florence-2 (Microsoft's prompt-driven vision model): an image item and a task in, the task's reading out.

A task token picks what the model reads: ``<OD>`` objects, ``<OCR>`` / ``<OCR_WITH_REGION>`` the text
(with its quadrilaterals), captions, ``<CAPTION_TO_PHRASE_GROUNDING>`` the boxes of the request's
labels, ``<DocVQA>`` (the fine-tunes') an answer to the request's ``instruction``. The prompt follows the
public server: an instruction is a DocVQA question unless it starts with a task token, and phrase
grounding reads the labels. transformers' native ``Florence2ForConditionalGeneration`` and
``Florence2Processor`` run it (a microsoft/* checkpoint is converted on load, see
``florence2_layout``); generation is greedy (or ``num_beams``) up to ``max_new_tokens`` with the
checkpoint's own generation defaults, and the processor's ``post_process_generation`` parses the reading.

``data`` holds that parse (``{task: answer}``); ``entities`` and ``objects`` repeat it in the public
server's form: text readings as entities (``text``, ``caption``, ``answer``), boxes as objects, each
scored 1.0 (generation gives no calibrated score). Boxes are pixel ``[x, y, width, height]``, an OCR
region's the rectangle around its quadrilateral. ``usage`` bills a row's text (the prompt with its
start and end tokens), not the image placeholders the processor puts before it: the image bills on
``images``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any, Final, Self

import numpy as np
import torch
from transformers import AutoProcessor, Florence2ForConditionalGeneration

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.florence2.layout import is_hub_layout, load_hub_layout
from sie.adapters.runtime.decoding import decoding
from sie.adapters.runtime.images import rgb_images
from sie.adapters.runtime.transformer import DeviceModel
from sie.catalog.families import FLORENCE2_OPTIONS
from sie.core.extraction import DetectedObject, Entity, Extraction
from sie.core.options import Capability, Modality
from sie.core.task import Task, UnsupportedInput

DOCVQA: Final = "<DocVQA>"
GROUNDING: Final = "<CAPTION_TO_PHRASE_GROUNDING>"
OCR_WITH_REGION: Final = "<OCR_WITH_REGION>"
NEW_TOKENS: Final = 1024  # the public adapter's default
NEEDS_IMAGE: Final = "Florence-2 reads images; every item needs one image"
# The entity label of a task whose reading is text (other text tasks read as "text").
_TEXT_LABELS: Final = {
    "<CAPTION>": "caption",
    "<DETAILED_CAPTION>": "caption",
    "<MORE_DETAILED_CAPTION>": "caption",
    DOCVQA: "answer",
}


def resolve_prompt(
    task: str, labels: Sequence[str], instruction: str | None, known: frozenset[str]
) -> tuple[str, str]:
    """The prompt and the task its reading is parsed as: an instruction is the prompt when it starts
    with a task token, else a DocVQA question; phrase grounding grounds the labels."""
    if instruction and instruction.strip():
        text = instruction.strip()
        token = text[: text.find(">") + 1] if text.startswith("<") else ""
        if token in known:
            return token + text[len(token) :].strip(), token
        return DOCVQA + text, DOCVQA
    if task == GROUNDING and labels:
        return task + ", ".join(labels), task
    return task, task


def _box(x1: float, y1: float, x2: float, y2: float) -> list[int]:
    """``[x, y, width, height]`` of two corners in whichever order the reading gave them."""
    return [int(min(x1, x2)), int(min(y1, y2)), int(abs(x2 - x1)), int(abs(y2 - y1))]


def extraction_of(task: str, answer: Any) -> Extraction:
    """The public server's entities and objects for one parsed reading (see the module docstring)."""
    data = {task: answer}
    if isinstance(answer, str):
        text = answer.strip()
        entities = [Entity(text, _TEXT_LABELS.get(task, "text"), 1.0)] if text else []
        return Extraction(entities=entities, data=data)
    if task == OCR_WITH_REGION:
        regions = zip(answer.get("quad_boxes", []), answer.get("labels", []), strict=False)
        entities = [
            Entity(text, "text", 1.0, bbox=_box(min(q[0::2]), min(q[1::2]), max(q[0::2]), max(q[1::2])))
            for q, text in regions
        ]
        return Extraction(entities=entities, data=data)
    boxes = zip(answer.get("bboxes", []), answer.get("labels", answer.get("bboxes_labels", [])), strict=False)
    objects = [DetectedObject(label or "object", 1.0, _box(*bbox)) for bbox, label in boxes]
    return Extraction(objects=objects, data=data)


def reading(processor: Any, text: str, task: str, size: tuple[int, int]) -> Extraction:
    """The processor's parse of a generated text for ``task``; a text that parse cannot take (a
    location token past the 1000 bins) is answered as its plain text in ``data``, not a failure."""
    try:
        parsed = processor.post_process_generation(text, task=task, image_size=size)
    except ValueError:
        plain = processor.post_process_generation(text, task="<OCR>", image_size=size)["<OCR>"]
        return Extraction(data={task: plain})
    return extraction_of(task, parsed[task])


class Florence2Extractor(DeviceModel):
    family = "Florence-2"
    capabilities = frozenset({Capability.EXTRACT})
    inputs = frozenset({Modality.IMAGE})
    packs_tokens = False
    request_options = FLORENCE2_OPTIONS

    def __init__(self, spec: LoadSpec) -> None:
        folder = spec.weights
        dtype = self._place(spec)
        model: Any
        config = json.loads((folder / "config.json").read_text())
        if is_hub_layout(config):
            model, self._processor, self._defaults = load_hub_layout(folder, config, dtype)
        else:  # transformers' own layout (the florence-community conversions)
            model = Florence2ForConditionalGeneration.from_pretrained(str(folder), dtype=dtype)
            processors: Any = AutoProcessor
            self._processor = processors.from_pretrained(str(folder))
            self._defaults = model.generation_config
        self.model = model.eval().to(self.device)
        self.tokenizer = TokenizerVocabulary(self._processor.tokenizer)
        self._positions = int(model.config.text_config.max_position_embeddings)
        self._tasks = frozenset(self._processor.tasks_answer_post_processing_type) | {DOCVQA}
        self._task = str(spec.loadtime.get("default_task", OCR_WITH_REGION))
        self._placeholder = int(self._processor.image_token_id)  # the image's positions in a row

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def _task_of(self, task: Task | None) -> str:
        value = task.option("task", self._task) if task else self._task
        if value not in self._tasks:
            known = ", ".join(sorted(self._tasks))
            raise UnsupportedInput(f"Florence-2 option 'task' must be one of {known}, got {value!r}")
        return str(value)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        request = forward.task
        decoding(request, self.family, NEW_TOKENS)  # refuse bad options before the item is queued
        prompt, task = resolve_prompt(
            self._task_of(request),
            request.labels if request else (),
            request.instruction if request else None,
            self._tasks,
        )
        placeholder = str(self._processor.image_token)
        if placeholder in prompt:  # it marks where the image goes; in a prompt it would misplace it
            raise UnsupportedInput(f"Florence-2 prompts cannot hold {placeholder!r}, the image's placeholder")
        prepared = []
        for image in rgb_images(inputs, NEEDS_IMAGE):
            try:
                encoded = self._processor(text=prompt, images=image, return_tensors="np")
            except ValueError as error:  # a task token that takes no input, given some
                raise UnsupportedInput(f"Florence-2 prompt {prompt!r}: {error}") from error
            ids = np.asarray(encoded["input_ids"][0], dtype=np.int64)
            if len(ids) > self._positions:
                raise UnsupportedInput(
                    f"Florence-2 reads {self._positions} positions; the image and this prompt take {len(ids)}"
                )
            pixels = np.ascontiguousarray(encoded["pixel_values"][0], np.float32)
            text = int(np.count_nonzero(ids != self._placeholder))  # usage: the image bills on ``images``
            prepared.append(Prepared(ids=ids, payload=(pixels, image.size, task), tokens=text))
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        """One generation per item, as for Donut: the rows of a batch must read exactly as each alone."""
        new_tokens, beams = decoding(forward.task, self.family, NEW_TOKENS)
        settings: Any = copy.deepcopy(self._defaults)
        settings.update(
            max_new_tokens=min(new_tokens, self._positions - 1),  # after the start token
            num_beams=beams,
            do_sample=False,
        )
        return BatchOutputs(extractions=[self._read(item, settings) for item in batch])

    def _read(self, item: Prepared, settings: Any) -> Extraction:
        pixels, size, task = item.payload
        inputs = self._moved(
            {
                "input_ids": torch.from_numpy(item.ids).unsqueeze(0),
                "pixel_values": torch.from_numpy(pixels).unsqueeze(0),
            }
        )
        with self._running():
            sequences = self.model.generate(**inputs, generation_config=settings)
        text = self._processor.batch_decode(sequences, skip_special_tokens=False)[0]
        return reading(self._processor, text, task, size)
