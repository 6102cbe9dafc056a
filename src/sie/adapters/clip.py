"""CLIP and SigLIP: a text tower and an image tower that embed into one space (transformers'
``CLIPModel`` / ``SiglipModel``).

``prepare`` (CPU pool) tokenizes a text with the model's own transformers tokenizer (SigLIP's
sentencepiece tokenizer lowercases and strips punctuation in Python, which no ``tokenizer.json``
reproduces) and decodes an image with Pillow into the pixel values of the model's image processor,
the PIL/NumPy one (no torchvision). An image's batching cost is the vision tower's sequence length
(its patches, plus CLIP's class token), so the batcher budgets it like a text of that many tokens.

``run`` (device thread) embeds a batch's texts with one ``get_text_features`` call and its images
with one ``get_image_features`` call, and puts the rows back in batch order. The families differ in
text padding only: CLIP pads to the batch's longest text (its causal mask and end-of-text pooling
make the padding invisible), SigLIP pads every text to ``max_length`` (64) as its processor and its
training do, because its text tower pools the last position, padding included.

A text past ``max_length`` is cut to it, as both processors cut; under ``options.overflow_policy:
error`` it is refused instead (``INPUT_TOO_LONG``), counted whole by the same tokenizer.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, ClassVar, Self

import numpy as np
import torch
from transformers import AutoTokenizer, CLIPModel, SiglipModel

# From its own module: transformers 5.16 exports a torchvision-only placeholder under the top-level
# name when torchvision is absent (there is no CPU build of it here), though the class itself loads
# the PIL processors we ask for.
from transformers.models.auto.image_processing_auto import AutoImageProcessor
from transformers.utils import logging as hf_logging

from sie.adapters.batch import BatchOutputs, ImageData, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.images import decode_image
from sie.adapters.runtime.transformer import DeviceModel, linear_weights_to
from sie.adapters.runtime.window import refusal
from sie.core.options import Capability, Modality, OverflowPolicy
from sie.core.task import UnsupportedInput

_BOTH: frozenset[Modality] = frozenset({Modality.TEXT, Modality.IMAGE})


class TokenizerVocabulary:
    """The engine's view of a transformers tokenizer: decoding OpenAI token-id inputs."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.vocab_size = len(tokenizer)

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))


def _features(output: Any) -> torch.Tensor:
    """transformers 5 returns the projected features as ``pooler_output``; 4.x returned the tensor."""
    tensor: torch.Tensor = output if isinstance(output, torch.Tensor) else output.pooler_output
    return tensor


class DualEncoder(DeviceModel):
    """What CLIP and SigLIP share; a family sets its model class, its name and its text padding."""

    family: ClassVar[str]
    request_options: ClassVar[frozenset[str]] = frozenset()
    model_class: ClassVar[Any]
    pads_to_max_length: ClassVar[bool]  # SigLIP: every text padded to max_length
    class_token: ClassVar[int]  # tokens the vision tower adds to the patches (CLIP's class token)
    capabilities = frozenset({Capability.DENSE})
    inputs = _BOTH
    # Texts are cut into length chunks by the engine; an image's cost (the vision tower's fixed
    # sequence length) is exact, so that split also keeps images apart from much shorter texts.
    packs_tokens = False

    def __init__(self, spec: LoadSpec) -> None:
        if spec.loadtime.get("backend", "transformers") != "transformers":
            raise ValueError(
                f"{self.family} runs transformers checkpoints only, not the "
                f"'{spec.loadtime['backend']}' backend (open_clip models such as Marqo's are not served)"
            )
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        folder = str(spec.tokenizer_folder)
        self._tokenizer = AutoTokenizer.from_pretrained(folder)
        self._tokenizer_lock = threading.Lock()  # a fast tokenizer reconfigures itself per call
        self.tokenizer = TokenizerVocabulary(self._tokenizer)
        self._images = AutoImageProcessor.from_pretrained(str(spec.weights), backend="pil")  # type: ignore[no-untyped-call]
        weights_dtype = self._place(spec)
        kwargs: dict[str, Any] = {"dtype": weights_dtype}
        if "attn_implementation" in spec.loadtime:
            kwargs["attn_implementation"] = spec.loadtime["attn_implementation"]
        model = self.model_class.from_pretrained(str(spec.weights), **kwargs)
        model.eval().to(self.device)
        if self._autocast is not None:
            linear_weights_to(model, self._autocast)
        self.model = model
        config = model.config
        self._max_length = self._text_length(spec.max_seq_length, config.text_config)
        self._pad_id = int(self._tokenizer.pad_token_id or 0)
        self._pad_left = getattr(self._tokenizer, "padding_side", "right") == "left"
        self._takes_mask = "attention_mask" in getattr(self._tokenizer, "model_input_names", ())
        vision = config.vision_config
        self._image_cost = (int(vision.image_size) // int(vision.patch_size)) ** 2 + self.class_token
        self.dims = {Capability.DENSE: self._output_dims(config)}

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def _text_length(self, configured: int | None, text_config: Any) -> int:
        """The YAML's length, within what the tokenizer and the position table allow."""
        caps = [int(text_config.max_position_embeddings)]
        tokenizer_max = getattr(self._tokenizer, "model_max_length", None)
        if isinstance(tokenizer_max, int) and 0 < tokenizer_max < 1_000_000:
            caps.append(tokenizer_max)
        return min([configured, *caps] if configured else caps)

    @staticmethod
    def _output_dims(config: Any) -> int:
        raise NotImplementedError

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        texts = [one for one in inputs if isinstance(one, str)]
        if len(texts) + sum(isinstance(one, ImageData) for one in inputs) != len(inputs):
            raise UnsupportedInput(f"{self.family} models embed single texts or images, not pairs")
        whole = forward.overflow is OverflowPolicy.ERROR  # counted uncut, and refused past the window
        token_ids = iter(self._token_ids(texts, cut=not whole) if texts else [])
        return [
            self._text(next(token_ids), forward) if isinstance(one, str) else self._pixels(one)
            for one in inputs
            if isinstance(one, str | ImageData)
        ]

    def _text(self, ids: np.ndarray, forward: Forward) -> Prepared:
        """A text batches at its padded length but bills the tokens it has."""
        if refused := refusal(forward, len(ids), self._max_length):
            return Prepared.refused(refused)
        return Prepared(ids, weight=self._max_length if self.pads_to_max_length else None, tokens=len(ids))

    def _token_ids(self, texts: list[str], cut: bool) -> list[np.ndarray]:
        """Each text's ids, cut to ``max_length`` (else whole, to be counted)."""
        with self._tokenizer_lock:
            encoded = self._tokenizer(
                texts, truncation=cut, max_length=self._max_length if cut else None, padding=False
            )
        return [np.asarray(ids, dtype=np.int64) for ids in encoded["input_ids"]]

    def _pixels(self, image: ImageData) -> Prepared:
        decoded = decode_image(image)
        try:
            pixels = self._images(images=[decoded], return_tensors="np")["pixel_values"][0]
        except (ValueError, OSError) as exc:  # e.g. a mode the processor cannot bring to RGB
            raise UnsupportedInput(
                f"Image ({decoded.format}, {decoded.mode}) cannot be processed: {exc}"
            ) from None
        pixels = np.ascontiguousarray(pixels, dtype=np.float32)
        return Prepared(payload=pixels, weight=self._image_cost, tokens=0)  # an image bills as an image

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        images = [row for row, item in enumerate(batch) if item.payload is not None]
        texts = [row for row, item in enumerate(batch) if item.payload is None]
        dense = np.empty((len(batch), self.dims[Capability.DENSE]), dtype=np.float32)
        with self._running():
            if texts:
                dense[texts] = self._embed_texts([batch[row].ids for row in texts])
            if images:
                dense[images] = self._embed_images([batch[row].payload for row in images])
        return BatchOutputs(dense=dense)

    def _embed_texts(self, ids: list[np.ndarray]) -> np.ndarray:
        width = self._max_length if self.pads_to_max_length else max(len(one) for one in ids)
        padded = np.full((len(ids), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, one in enumerate(ids):
            span = slice(width - len(one), width) if self._pad_left else slice(0, len(one))
            padded[row, span] = one
            mask[row, span] = 1
        inputs = {"input_ids": torch.from_numpy(padded).to(self.device)}
        if self._takes_mask:
            inputs["attention_mask"] = torch.from_numpy(mask).to(self.device)
        return _features(self.model.get_text_features(**inputs)).float().cpu().numpy()

    def _embed_images(self, pixels: list[np.ndarray]) -> np.ndarray:
        stacked = torch.from_numpy(np.stack(pixels)).to(self.device, self._pixel_dtype)
        return _features(self.model.get_image_features(pixel_values=stacked)).float().cpu().numpy()


class ClipEncoder(DualEncoder):
    family = "CLIP"
    model_class = CLIPModel
    pads_to_max_length = False
    class_token = 1

    @staticmethod
    def _output_dims(config: Any) -> int:
        return int(config.projection_dim)


class SiglipEncoder(DualEncoder):
    family = "SigLIP"
    model_class = SiglipModel
    pads_to_max_length = True
    class_token = 0  # SigLIP pools the patches with an attention head, no class token

    @staticmethod
    def _output_dims(config: Any) -> int:
        return int(config.vision_config.hidden_size)
