"""Donut (OCR-free document understanding): an image item in, the model's structured reading in ``data``.

The profile's ``task`` prompt (``<s_cord-v2>`` parses receipts, ``<s_docvqa>`` answers the request's
``instruction`` as its question) starts the decoder; the Swin encoder reads the page through the
checkpoint's own ``DonutProcessor``, generation is greedy (or ``num_beams``) up to ``max_new_tokens``
with the unknown token banned, and ``DonutProcessor.token2json`` turns the tag sequence into JSON, all
as the model card runs it. ``data`` holds that JSON; ``entities`` repeat it in the public server's
form: a receipt's leaves with their key path as label, a DocVQA ``answer``, an RVL-CDIP
``document_class``, each scored 1.0 (generation gives no calibrated score). ``usage`` bills an item
its decoder prompt's tokens (the task tag and a question); the page bills on ``images``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, Self

import numpy as np
import torch
from transformers import DonutProcessor, VisionEncoderDecoderModel

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.decoding import decoding
from sie.adapters.runtime.images import rgb_images
from sie.adapters.runtime.transformer import DeviceModel
from sie.catalog.families import DONUT_OPTIONS
from sie.core.extraction import Entity, Extraction
from sie.core.options import Capability, Modality
from sie.core.task import Task, UnsupportedInput

CORD: Final = "<s_cord-v2>"
DOCVQA: Final = "<s_docvqa>"
RVLCDIP: Final = "<s_rvlcdip>"
NEEDS_IMAGE: Final = "Donut reads document images; every item needs one image"
_TASK_TAG: Final = re.compile(r"<s_[^<>\s]+>")
_FIRST_TAG: Final = re.compile(r"<.*?>")  # the task tag the reading starts with (the model card's)


def prompt(task: str, question: str | None) -> str:
    """The decoder's prompt: the task tag, and for DocVQA the question the answer follows."""
    if task == DOCVQA and question:
        return f"{task}<s_question>{question}</s_question><s_answer>"
    return task


def generation(task: Task | None) -> tuple[int, int]:
    """``max_new_tokens`` (512) and ``num_beams`` (1, greedy) from the request or the profile."""
    return decoding(task, "Donut", 512)


def entities_of(parsed: dict[str, Any], task: str) -> list[Entity]:
    """The public server's entities for a Donut reading (see the module docstring)."""
    if task == DOCVQA:
        answer = parsed.get("answer", parsed.get("text_sequence", ""))
        return [Entity(str(answer), "answer", 1.0)] if answer else []
    if task == RVLCDIP:
        found = parsed.get("class", parsed.get("text_sequence", ""))
        return [Entity(str(found), "document_class", 1.0)] if found else []
    if task != CORD:
        return []
    leaves: list[Entity] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                label = f"{path}.{key}" if path else str(key)
                if isinstance(value, str):
                    leaves.append(Entity(value, label, 1.0))
                else:
                    walk(value, label)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]")

    walk(parsed, "")
    return leaves


class DonutExtractor(DeviceModel):
    family = "Donut"
    capabilities = frozenset({Capability.EXTRACT})
    inputs = frozenset({Modality.IMAGE})
    packs_tokens = False
    request_options = DONUT_OPTIONS

    def __init__(self, spec: LoadSpec) -> None:
        folder = str(spec.weights)
        self._processor: Any = DonutProcessor.from_pretrained(folder)
        self.tokenizer = TokenizerVocabulary(self._processor.tokenizer)
        model: Any = VisionEncoderDecoderModel.from_pretrained(folder, dtype=self._place(spec))
        self.model = model.eval().to(self.device)
        encoder = model.config.encoder
        height, width = (
            encoder.image_size if isinstance(encoder.image_size, list | tuple) else [encoder.image_size] * 2
        )
        patch = int(encoder.patch_size)
        self._image_cost = (int(height) // patch) * (int(width) // patch)
        self._positions = int(model.config.decoder.max_position_embeddings)
        self._task = str(spec.loadtime.get("task", CORD))

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def _task_of(self, task: Task | None) -> str:
        value = task.option("task", self._task) if task else self._task
        if not isinstance(value, str) or not _TASK_TAG.fullmatch(value):
            raise UnsupportedInput(f"Donut option 'task' must be a task tag such as '{CORD}', got {value!r}")
        return value

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        task = self._task_of(forward.task)
        generation(forward.task)  # refuse bad options before the item is queued
        text = prompt(task, forward.task.instruction if forward.task else None)
        ids = np.asarray(self._processor.tokenizer(text, add_special_tokens=False).input_ids, dtype=np.int64)
        if len(ids) >= self._positions:
            raise UnsupportedInput(f"Donut prompt of {len(ids)} tokens leaves no room in {self._positions}")
        prepared = []
        for image in rgb_images(inputs, NEEDS_IMAGE):
            pixels = self._processor(image, return_tensors="np").pixel_values[0]
            payload = np.ascontiguousarray(pixels, np.float32)
            prepared.append(Prepared(ids=ids, payload=payload, weight=self._image_cost, tokens=len(ids)))
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        """One generation per item: greedy decoding of a batch pads finished rows, and the rows of
        a batch must read exactly as each alone."""
        task = self._task_of(forward.task)
        new_tokens, beams = generation(forward.task)
        return BatchOutputs(extractions=[self._read(item, task, new_tokens, beams) for item in batch])

    def _read(self, item: Prepared, task: str, new_tokens: int, beams: int) -> Extraction:
        tokenizer = self._processor.tokenizer
        inputs = self._moved(
            {
                "pixel_values": torch.from_numpy(item.payload).unsqueeze(0),
                "decoder_input_ids": torch.from_numpy(item.ids).unsqueeze(0),
            }
        )
        with self._running():
            sequences = self.model.generate(
                **inputs,
                max_new_tokens=min(new_tokens, self._positions - len(item.ids)),
                num_beams=beams,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                bad_words_ids=[[tokenizer.unk_token_id]],
            )
        text = self._processor.batch_decode(sequences)[0]
        text = text.replace(tokenizer.eos_token, "").replace(tokenizer.pad_token, "")
        text = _FIRST_TAG.sub("", text, count=1).strip()
        parsed = self._processor.token2json(text)
        data = parsed if isinstance(parsed, dict) else {"items": parsed}
        return Extraction(entities=entities_of(data, task), data=data)
