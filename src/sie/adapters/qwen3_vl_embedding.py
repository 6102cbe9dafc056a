"""Qwen3-VL-Embedding: texts, images and images with their captions in one dense space.

The model is transformers' ``Qwen3VLForConditionalGeneration`` read as its model card's recipe reads
it: a system turn holding the instruction (stripped, a period added unless it ends in punctuation), a
user turn of the item's image then its text, the assistant turn opened; the embedding is the final
norm's state at the last token (``pooling: last``, the public default) or their mean over the real
tokens (``pooling: mean``), normalised by the engine. The instruction is the request's, else the
profile's ``default_instruction``, else the model card's ``Represent the user's input.``; it is placed
in the system turn, never before the text (``places_instruction``). ``qwen3_vl`` says how items are
read and batched. ``usage`` bills an item its text alone (a caption's, none for a bare image), cut at
the model's length, as the public server counts it: the instruction and template are not the
caller's input, and an image's placeholders bill on ``images``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import partial
from typing import Final

from PIL import Image

from sie.adapters.batch import BatchOutputs, ImageData, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec, Trait
from sie.adapters.qwen3_vl import Conversation, Qwen3VlFamily, image_part, page, text_part
from sie.core.extraction import ItemError
from sie.core.options import Capability, Pooling
from sie.core.task import UnsupportedInput

DEFAULT_INSTRUCTION: Final = "Represent the user's input."


def system_instruction(instruction: str) -> str:
    """The model card's shaping of an instruction: stripped, a period added unless it already ends in
    punctuation; a blank one is the default."""
    text = instruction.strip() or DEFAULT_INSTRUCTION
    return text if unicodedata.category(text[-1]).startswith("P") else text + "."


def _conversation(instruction: str, images: list[Image.Image], text: str) -> Conversation:
    """The model card's: the instruction as the system turn, the item's image then its text."""
    content = [image_part(image) for image in images]
    if text or not content:
        content.append(text_part(text))
    return [{"role": "system", "content": [text_part(instruction)]}, {"role": "user", "content": content}]


class Qwen3VlEmbedder(Qwen3VlFamily):
    family = "Qwen3-VL-Embedding"
    capabilities = frozenset({Capability.DENSE})
    default_pooling = Pooling.LAST
    traits = Qwen3VlFamily.traits | {Trait.PLACES_INSTRUCTION}

    def __init__(self, spec: LoadSpec) -> None:
        generator = self._load(spec, spec.weights)
        self.dims = {Capability.DENSE: int(generator.config.text_config.hidden_size)}

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        pooling = forward.pooling or self.default_pooling
        if pooling not in (Pooling.LAST, Pooling.MEAN):
            raise UnsupportedInput(f"{self.family} pools the last token or the mean, not '{pooling}'")
        instruction = system_instruction((forward.task.instruction if forward.task else None) or "")
        limit = self._limit(forward)
        prepared = []
        for one in inputs:
            if isinstance(one, str):
                text, images = one, list[Image.Image]()
            elif isinstance(one, ImageData):
                text, images = one.text or "", [page(one, self.family)]
            else:
                raise UnsupportedInput(f"{self.family} embeds a text, an image or an image with its text")
            pictures = [self._vlm.picture(image) for image in images]
            tensors = self._vlm.read(
                partial(_conversation, instruction, images), text, pictures, limit, forward
            )
            if isinstance(tensors, ItemError):
                prepared.append(Prepared.refused(tensors))
                continue
            tokens = min(self._vlm.count(text), self._max_length)
            prepared.append(Prepared(tensors.input_ids.numpy(), payload=tensors, tokens=tokens))
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self._running():
            hidden, inputs = self._states(batch)
            if (forward.pooling or self.default_pooling) is Pooling.MEAN:
                mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1)
            else:  # padded on the left: every row's last position is its last token
                pooled = hidden[:, -1]
            return BatchOutputs(dense=pooled.float().cpu().numpy())
