"""What the open-vocabulary detectors share (OWLv2, Grounding DINO): image items in, ``objects`` out,
a transformers detector loaded with its tokenizer and image processor, its forward under the
precision's autocast, and boxes answered as ``[x, y, width, height]`` in whole pixels (truncated, as
the public server answers them). Each family sets its model class and writes its own prompt, batch
and post-processing.

``usage`` bills an item the text its image is read with (the labels' prompt, with its special tokens,
not the padding), its image on ``images``: the detector's patches are not text tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Final, Self

import torch
from PIL import Image
from tokenizers import Tokenizer
from transformers import AutoTokenizer
from transformers.models.auto.image_processing_auto import AutoImageProcessor

from sie.adapters.batch import ModelInput
from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.contract import LoadSpec
from sie.adapters.runtime.images import rgb_images
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import DeviceModel
from sie.core.options import Capability, Modality

NEEDS_IMAGE: Final = "detects objects in images; every item needs one image"


def pixel_box(corners: Sequence[float]) -> list[int]:
    """``[x1, y1, x2, y2]`` corners as ``[x, y, width, height]`` in whole pixels."""
    x1, y1, x2, y2 = corners
    return [int(x1), int(y1), int(x2 - x1), int(y2 - y1)]


class ImageDetector(DeviceModel):
    family: ClassVar[str]
    model_class: ClassVar[Any]
    capabilities = frozenset({Capability.EXTRACT})
    inputs = frozenset({Modality.IMAGE})
    packs_tokens = False

    def __init__(self, spec: LoadSpec) -> None:
        folder = str(spec.weights)
        self._tokenizer = AutoTokenizer.from_pretrained(folder)
        self.tokenizer = TokenizerVocabulary(self._tokenizer)
        # A copy of the tokenizer for counting in ``prepare`` (the CPU pool) while ``run`` tokenizes
        # on the device thread: a fast tokenizer's settings are not to be changed from two threads.
        self._counter = TextTokenizer(Tokenizer.from_str(self._tokenizer.backend_tokenizer.to_str()), None)
        self._images = AutoImageProcessor.from_pretrained(folder, backend="pil")  # type: ignore[no-untyped-call]
        model: Any = self.model_class.from_pretrained(folder, dtype=self._place(spec))
        self.model = model.eval().to(self.device)

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def _text_tokens(self, texts: Sequence[str], max_length: int | None = None) -> int:
        """The tokens of ``texts`` as the family's forward reads them (special tokens included, each
        cut at ``max_length``), padding left out: what an image item read with them bills."""
        counts = (len(ids) for ids in self._counter.encode(list(texts)))
        return sum(min(count, max_length) if max_length else count for count in counts)

    def _decoded(self, inputs: Sequence[ModelInput]) -> list[Image.Image]:
        return rgb_images(inputs, f"{self.family} {NEEDS_IMAGE}")

    def _forward(self, **inputs: torch.Tensor) -> Any:
        """The detector on the device (pixels in the weights' dtype), its logits and boxes back in
        float32 for the processor's post-processing."""
        with self._running():
            outputs = self.model(**self._moved(inputs))
        outputs.logits = outputs.logits.float()
        outputs.pred_boxes = outputs.pred_boxes.float()
        return outputs
