"""Grounding DINO open-vocabulary object detection: the request's labels (or, without labels, its
``instruction``) are a text prompt grounded in each item's image, answered as ``objects``.

As the public server does, the labels become one prompt, each lowercased and closed by a period
(``"cat. remote control."``); transformers' processor pads the batch's images (with a pixel mask)
and tokenizes the prompt, and its ``post_process_grounded_object_detection`` keeps the boxes whose
best prompt token scores at least ``box_threshold`` and names each by the prompt tokens above
``text_threshold``. That phrase comes back lowercased and possibly cut or merged across two labels,
so it is mapped onto the request's label it overlaps most (the share of the label's words it
contains, then how many; the earlier label on a tie); a phrase that shares no word with any label,
as under an instruction prompt, is kept as it is. Boxes are ``[x, y, width, height]`` in the
original image's whole pixels.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from PIL import Image
from transformers import GroundingDinoForObjectDetection, GroundingDinoProcessor

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.detection import ImageDetector, pixel_box
from sie.adapters.options import unit_option
from sie.catalog.families import GROUNDING_OPTIONS
from sie.core.extraction import DetectedObject, Extraction
from sie.core.task import Task, UnsupportedInput

NO_PROMPT: Final = "Grounding DINO requires labels or an instruction: what to find in the image"
DEFAULT_THRESHOLD: Final = 0.25
_WORD: Final = re.compile(r"\w+")


def prompt(task: Task | None) -> str:
    labels = [label for label in (task.labels if task else ()) if isinstance(label, str) and label.strip()]
    if labels:
        return " ".join(f"{label.lower().strip()}." for label in labels)
    instruction = (task.instruction or "").strip().lower() if task else ""
    if not instruction:
        raise UnsupportedInput(NO_PROMPT)
    return instruction if instruction.endswith(".") else f"{instruction}."


def threshold(task: Task | None, name: str, default: float) -> float:
    return unit_option(task, name, default, "Grounding DINO")


def label_of(phrase: str, labels: Sequence[str]) -> str:
    """The request's label ``phrase`` was decoded from (see the module docstring), else ``phrase``."""
    words = set(_WORD.findall(phrase.lower()))
    best, best_key = phrase, (0.0, 0)
    for label in labels:
        own = set(_WORD.findall(label.lower()))
        if not own:
            continue
        matched = len(own & words)
        key = (matched / len(own), matched)
        if key > best_key:
            best, best_key = label, key
    return best


class GroundingDinoDetector(ImageDetector):
    family = "GroundingDINO"
    model_class = GroundingDinoForObjectDetection
    request_options = GROUNDING_OPTIONS
    # In float16 or bfloat16 (the public YAMLs ask float16 on a GPU) its multi-scale deformable
    # attention gets half features and float32 sampling grids: without autocast the load's warm-up
    # fails with "expected scalar type Half but found Float" (seen on an H200, transformers 5.16).
    half_under_autocast = True

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self._processor = GroundingDinoProcessor(image_processor=self._images, tokenizer=self._tokenizer)  # type: ignore[no-untyped-call]
        self._queries = int(self.model.config.num_queries)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        tokens = self._text_tokens([prompt(forward.task)])
        for name in ("box_threshold", "text_threshold"):
            threshold(forward.task, name, DEFAULT_THRESHOLD)
        return [
            Prepared(payload=image, weight=self._queries, tokens=tokens) for image in self._decoded(inputs)
        ]

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        task = forward.task
        images: list[Image.Image] = [item.payload for item in batch]
        inputs = self._processor(images=images, text=[prompt(task)] * len(images), return_tensors="pt")
        outputs = self._forward(**inputs)
        results = self._processor.post_process_grounded_object_detection(
            outputs,
            inputs["input_ids"].to(self.device),
            threshold=threshold(task, "box_threshold", DEFAULT_THRESHOLD),
            text_threshold=threshold(task, "text_threshold", DEFAULT_THRESHOLD),
            target_sizes=[(image.height, image.width) for image in images],
        )
        labels = list(task.labels) if task else []
        return BatchOutputs(extractions=[Extraction(objects=objects(result, labels)) for result in results])


def objects(result: dict[str, Any], labels: list[str]) -> list[DetectedObject]:
    # ``text_labels`` in transformers 5 (its ``labels`` warns that it will become ids).
    phrases = result["text_labels"] if "text_labels" in result else result["labels"]
    return [
        DetectedObject(label_of(str(phrase), labels), float(score), pixel_box(box))
        for box, score, phrase in zip(
            result["boxes"].tolist(), result["scores"].tolist(), phrases, strict=True
        )
    ]
