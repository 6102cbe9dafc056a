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
from typing import Any, Final, Self

import numpy as np
import torch
from transformers import AutoTokenizer, Owlv2ForObjectDetection
from transformers.models.auto.image_processing_auto import AutoImageProcessor

from sie.adapters.base import (
    BatchOutputs,
    Forward,
    ImageData,
    LoadSpec,
    ModelInput,
    Prepared,
    Task,
    UnsupportedInput,
    unit_option,
)
from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.images import decode_image
from sie.adapters.registry import DETECTION_OPTIONS
from sie.adapters.transformer import weights_and_autocast
from sie.core.extraction import DetectedObject, Extraction
from sie.core.heap import collect_unloaded
from sie.core.options import Capability, Modality, Pooling

NO_LABELS: Final = "Object detection requires labels: the things to find in the image"
NEEDS_IMAGE: Final = "OWLv2 detects objects in images; every item needs one image"
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
    """A post-processed result as ``objects``: corners become ``[x, y, width, height]``, truncated to
    whole pixels as the public server answers."""
    objects = []
    for box, score, index in zip(
        result["boxes"].tolist(), result["scores"].tolist(), result["labels"].tolist(), strict=True
    ):
        x1, y1, x2, y2 = box
        objects.append(
            DetectedObject(labels[index], float(score), [int(x1), int(y1), int(x2 - x1), int(y2 - y1)])
        )
    return objects


class Owlv2Detector:
    family = "Owlv2"
    request_options = DETECTION_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = frozenset({Modality.IMAGE})
    dims: dict[Capability, int] = {}  # noqa: RUF012  # objects only
    default_pooling = Pooling.CLS  # unused: no embeddings
    packs_tokens = False

    def __init__(self, spec: LoadSpec) -> None:
        folder = str(spec.weights)
        self._tokenizer = AutoTokenizer.from_pretrained(folder)
        self.tokenizer = TokenizerVocabulary(self._tokenizer)
        self._images = AutoImageProcessor.from_pretrained(folder, backend="pil")  # type: ignore[no-untyped-call]
        self.device = torch.device(spec.device)
        weights_dtype, self._autocast = weights_and_autocast(spec.precision, spec.device)
        self._pixel_dtype = weights_dtype
        model: Any = Owlv2ForObjectDetection.from_pretrained(folder, dtype=weights_dtype)
        self.model = model.eval().to(self.device)
        config: Any = model.config
        self._text_length = int(config.text_config.max_position_embeddings)
        vision = config.vision_config
        self._image_cost = (int(vision.image_size) // int(vision.patch_size)) ** 2
        self._threshold = score_threshold(
            None, float(spec.loadtime.get("score_threshold", DEFAULT_THRESHOLD))
        )

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        labels_of(forward.task)
        score_threshold(forward.task, self._threshold)
        prepared = []
        for one in inputs:
            if not isinstance(one, ImageData):
                raise UnsupportedInput(NEEDS_IMAGE)
            image = decode_image(one).convert("RGB")
            pixels = self._images(images=[image], return_tensors="np")["pixel_values"][0]
            side = max(image.width, image.height)  # the processor pads to this square
            prepared.append(
                Prepared(payload=(np.ascontiguousarray(pixels, np.float32), side), weight=self._image_cost)
            )
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        labels = labels_of(forward.task)
        threshold = score_threshold(forward.task, self._threshold)
        texts = self._tokenizer(
            [query(label) for label in labels] * len(batch),
            padding="max_length",
            truncation=True,
            max_length=self._text_length,
            return_tensors="pt",
        )
        pixels = torch.from_numpy(np.stack([item.payload[0] for item in batch]))
        sides = torch.tensor([[item.payload[1]] * 2 for item in batch])
        enabled = self._autocast is not None
        with (
            torch.inference_mode(),
            torch.autocast(self.device.type, dtype=self._autocast or torch.bfloat16, enabled=enabled),
        ):
            outputs = self.model(
                input_ids=texts["input_ids"].to(self.device),
                attention_mask=texts["attention_mask"].to(self.device),
                pixel_values=pixels.to(self.device, self._pixel_dtype),
            )
        outputs.logits = outputs.logits.float()
        outputs.pred_boxes = outputs.pred_boxes.float()
        results = self._images.post_process_object_detection(outputs, threshold=threshold, target_sizes=sides)
        return BatchOutputs(
            extractions=[Extraction(objects=to_objects(result, labels)) for result in results]
        )

    def close(self) -> None:
        del self.model
        collect_unloaded()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
