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
from typing import Any, Final, Self

import torch
from PIL import Image
from transformers import AutoTokenizer, GroundingDinoForObjectDetection, GroundingDinoProcessor
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
from sie.adapters.registry import GROUNDING_OPTIONS
from sie.adapters.transformer import weights_and_autocast
from sie.core.extraction import DetectedObject, Extraction
from sie.core.heap import collect_unloaded
from sie.core.options import Capability, Modality, Pooling

NO_PROMPT: Final = "Grounding DINO requires labels or an instruction: what to find in the image"
NEEDS_IMAGE: Final = "Grounding DINO detects objects in images; every item needs one image"
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


class GroundingDinoDetector:
    family = "GroundingDINO"
    request_options = GROUNDING_OPTIONS
    capabilities = frozenset({Capability.EXTRACT})
    inputs = frozenset({Modality.IMAGE})
    dims: dict[Capability, int] = {}  # noqa: RUF012  # objects only
    default_pooling = Pooling.CLS  # unused: no embeddings
    packs_tokens = False

    def __init__(self, spec: LoadSpec) -> None:
        folder = str(spec.weights)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        self.tokenizer = TokenizerVocabulary(tokenizer)
        images = AutoImageProcessor.from_pretrained(folder, backend="pil")  # type: ignore[no-untyped-call]
        self._processor = GroundingDinoProcessor(image_processor=images, tokenizer=tokenizer)  # type: ignore[no-untyped-call]
        self.device = torch.device(spec.device)
        weights_dtype, self._autocast = weights_and_autocast(spec.precision, spec.device)
        self._pixel_dtype = weights_dtype
        model: Any = GroundingDinoForObjectDetection.from_pretrained(folder, dtype=weights_dtype)
        self.model = model.eval().to(self.device)
        self._queries = int(model.config.num_queries)

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        prompt(forward.task)
        for name in ("box_threshold", "text_threshold"):
            threshold(forward.task, name, DEFAULT_THRESHOLD)
        prepared = []
        for one in inputs:
            if not isinstance(one, ImageData):
                raise UnsupportedInput(NEEDS_IMAGE)
            prepared.append(Prepared(payload=decode_image(one).convert("RGB"), weight=self._queries))
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        task = forward.task
        text = prompt(task)
        images: list[Image.Image] = [item.payload for item in batch]
        inputs = self._processor(images=images, text=[text] * len(images), return_tensors="pt")
        inputs = {
            key: value.to(self.device, self._pixel_dtype) if key == "pixel_values" else value.to(self.device)
            for key, value in inputs.items()
        }
        enabled = self._autocast is not None
        with (
            torch.inference_mode(),
            torch.autocast(self.device.type, dtype=self._autocast or torch.bfloat16, enabled=enabled),
        ):
            outputs = self.model(**inputs)
        outputs.logits = outputs.logits.float()
        outputs.pred_boxes = outputs.pred_boxes.float()
        results = self._processor.post_process_grounded_object_detection(
            outputs,
            inputs["input_ids"],
            threshold=threshold(task, "box_threshold", DEFAULT_THRESHOLD),
            text_threshold=threshold(task, "text_threshold", DEFAULT_THRESHOLD),
            target_sizes=[(image.height, image.width) for image in images],
        )
        labels = list(task.labels) if task else []
        return BatchOutputs(
            extractions=[Extraction(objects=self._objects(result, labels)) for result in results]
        )

    @staticmethod
    def _objects(result: dict[str, Any], labels: list[str]) -> list[DetectedObject]:
        # ``text_labels`` in transformers 5 (its ``labels`` warns that it will become ids).
        phrases = result["text_labels"] if "text_labels" in result else result["labels"]
        objects = []
        for box, score, phrase in zip(
            result["boxes"].tolist(), result["scores"].tolist(), phrases, strict=True
        ):
            x1, y1, x2, y2 = box
            objects.append(
                DetectedObject(
                    label_of(str(phrase), labels),
                    float(score),
                    [int(x1), int(y1), int(x2 - x1), int(y2 - y1)],
                )
            )
        return objects

    def close(self) -> None:
        del self.model
        collect_unloaded()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
