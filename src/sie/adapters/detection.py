"""What the open-vocabulary detectors share (OWLv2, Grounding DINO): image items in, ``objects`` out,
a transformers detector loaded with its tokenizer and image processor, its forward under the
precision's autocast, and boxes answered as ``[x, y, width, height]`` in whole pixels (truncated, as
the public server answers them). Each family sets its model class and writes its own prompt, batch
and post-processing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Self

import torch
from PIL import Image
from transformers import AutoTokenizer
from transformers.models.auto.image_processing_auto import AutoImageProcessor

from sie.adapters.base import ImageData, LoadSpec, ModelInput, UnsupportedInput
from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.images import decode_image
from sie.adapters.transformer import weights_and_autocast
from sie.core.heap import collect_unloaded
from sie.core.options import Capability, Modality, Pooling


def pixel_box(corners: Sequence[float]) -> list[int]:
    """``[x1, y1, x2, y2]`` corners as ``[x, y, width, height]`` in whole pixels."""
    x1, y1, x2, y2 = corners
    return [int(x1), int(y1), int(x2 - x1), int(y2 - y1)]


class ImageDetector:
    family: ClassVar[str]
    model_class: ClassVar[Any]
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
        model: Any = self.model_class.from_pretrained(folder, dtype=weights_dtype)
        self.model = model.eval().to(self.device)

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def _decoded(self, inputs: Sequence[ModelInput]) -> list[Image.Image]:
        """Each item's image as RGB; an item without one is the client's error."""
        images = []
        for one in inputs:
            if not isinstance(one, ImageData):
                raise UnsupportedInput(f"{self.family} detects objects in images; every item needs one image")
            images.append(decode_image(one).convert("RGB"))
        return images

    def _forward(self, **inputs: torch.Tensor) -> Any:
        """The detector on the device (pixels in the weights' dtype), its logits and boxes back in
        float32 for the processor's post-processing."""
        moved = {
            key: value.to(self.device, self._pixel_dtype) if key == "pixel_values" else value.to(self.device)
            for key, value in inputs.items()
        }
        with self._running():
            outputs = self.model(**moved)
        outputs.logits = outputs.logits.float()
        outputs.pred_boxes = outputs.pred_boxes.float()
        return outputs

    @contextmanager
    def _running(self) -> Iterator[None]:
        enabled = self._autocast is not None
        with (
            torch.inference_mode(),
            torch.autocast(self.device.type, dtype=self._autocast or torch.bfloat16, enabled=enabled),
        ):
            yield

    def close(self) -> None:
        del self.model
        collect_unloaded()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
