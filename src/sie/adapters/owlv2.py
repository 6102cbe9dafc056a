"""OWLv2 open-vocabulary object detection: the request's labels are what to find in each item's image,
answered as ``objects`` (label, score and an ``[x, y, width, height]`` box in the image's pixels).

Each label is asked as the text query ``a photo of {label}`` (lowercased, as the public server asks),
every image goes through transformers' OWLv2 image processor (resized and padded to a square on the
bottom and right), and the model's boxes are read back with the processor's own
``post_process_object_detection`` against that padded square, so a box lands on the original pixels.
A box is kept when its best label scores at least ``score_threshold`` (``threshold`` is accepted for
it; the profile's default, else 0.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import torch
from transformers import Owlv2ForObjectDetection

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.detection import ImageDetector, pixel_box
from sie.adapters.options import unit_option
from sie.catalog.families import DETECTION_OPTIONS
from sie.core.extraction import DetectedObject, Extraction
from sie.core.task import Task, UnsupportedInput

NO_LABELS: Final = "Object detection requires labels: the things to find in the image"
DEFAULT_THRESHOLD: Final = 0.1


def query(label: str) -> str:
    return f"a photo of {label.lower().strip()}"


def score_threshold(task: Task | None, default: float) -> float:
    """``score_threshold``, else its alias ``threshold``, else ``default``."""
    return unit_option(task, "score_threshold", unit_option(task, "threshold", default, "OWLv2"), "OWLv2")


def labels_of(task: Task | None) -> list[str]:
    labels = list(task.labels) if task else []
    if not labels or any(not isinstance(label, str) or not label.strip() for label in labels):
        raise UnsupportedInput(NO_LABELS)
    return labels


def to_objects(result: dict[str, Any], labels: Sequence[str]) -> list[DetectedObject]:
    return [
        DetectedObject(labels[index], float(score), pixel_box(box))
        for box, score, index in zip(
            result["boxes"].tolist(), result["scores"].tolist(), result["labels"].tolist(), strict=True
        )
    ]


class Owlv2Detector(ImageDetector):
    family = "Owlv2"
    model_class = Owlv2ForObjectDetection
    request_options = DETECTION_OPTIONS

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        config: Any = self.model.config
        self._text_length = int(config.text_config.max_position_embeddings)
        vision = config.vision_config
        self._image_cost = (int(vision.image_size) // int(vision.patch_size)) ** 2
        self._threshold = score_threshold(
            None, float(spec.loadtime.get("score_threshold", DEFAULT_THRESHOLD))
        )

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        labels = labels_of(forward.task)
        score_threshold(forward.task, self._threshold)
        tokens = self._text_tokens([query(label) for label in labels], self._text_length)
        prepared = []
        for image in self._decoded(inputs):
            pixels = self._images(images=[image], return_tensors="np")["pixel_values"][0]
            side = max(image.width, image.height)  # the processor pads to this square
            payload = (np.ascontiguousarray(pixels, np.float32), side)
            prepared.append(Prepared(payload=payload, weight=self._image_cost, tokens=tokens))
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        labels = labels_of(forward.task)
        texts = self._tokenizer(
            [query(label) for label in labels] * len(batch),
            padding="max_length",
            truncation=True,
            max_length=self._text_length,
            return_tensors="pt",
        )
        outputs = self._forward(
            input_ids=texts["input_ids"],
            attention_mask=texts["attention_mask"],
            pixel_values=torch.from_numpy(np.stack([item.payload[0] for item in batch])),
        )
        results = self._images.post_process_object_detection(
            outputs,
            threshold=score_threshold(forward.task, self._threshold),
            target_sizes=torch.tensor([[item.payload[1]] * 2 for item in batch]),
        )
        return BatchOutputs(
            extractions=[Extraction(objects=to_objects(result, labels)) for result in results]
        )
