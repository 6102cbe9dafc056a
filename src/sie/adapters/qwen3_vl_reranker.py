"""Qwen3-VL-Reranker: a (query, document) pair, each side a text, an image or an image with its
text, scored by the chat VLM's answer to whether the document meets the query.

The prompt is the model card's: a system turn asking for "yes" or "no", one user turn of
``<Instruct>: {instruction}``, ``<Query>:`` with the query's image and text, ``\\n<Document>:`` with
the document's, then the assistant turn opened. The score is ``sigmoid(yes - no)`` of the next-token
logits at the last token; only the output head's two rows are multiplied, in float32, with each pair's
last state. The instruction is the request's, else the profile's ``default_instruction``, else the
model card's. A document too long for the model is cut (its text only); the query and the images are
never cut. ``usage`` bills the whole prompt (image placeholders included), as the public server does;
its ``content`` is the caller's text in it, each part tokenized alone: the query's text, the
request's instruction (a default one is template) and what is left of the document's text.

The reranker's repository ships its tokenizer but not its image processor and chat template: those
come from ``loadtime.base_processor_model`` at ``base_processor_revision`` (Qwen3-VL-2B-Instruct), fetched
through the engine's weight tiers, as the public server does. ``qwen3_vl`` says how items are read
and batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Final, NamedTuple

import numpy as np
import torch
from PIL import Image

from sie.adapters.batch import BatchOutputs, ImageData, MediaPair, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.qwen3_vl import Conversation, Picture, Qwen3VlFamily, image_part, page, text_part
from sie.core.extraction import ItemError
from sie.core.options import Capability
from sie.core.task import UnsupportedInput

DEFAULT_INSTRUCTION: Final = "Retrieve relevant documents for the query."
SYSTEM_PROMPT: Final = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)


class Side(NamedTuple):
    """One side of a pair: its text, its decoded images and their pictures."""

    text: str
    images: list[Image.Image]
    pictures: list[Picture]


def _conversation(instruction: str, query: Side, images: list[Image.Image], document: str) -> Conversation:
    content = [text_part(f"<Instruct>: {instruction}"), text_part("<Query>:")]
    content += [image_part(image) for image in query.images]
    if query.text:
        content.append(text_part(query.text))
    content.append(text_part("\n<Document>:"))
    content += [image_part(image) for image in images]
    if document:
        content.append(text_part(document))
    return [{"role": "system", "content": [text_part(SYSTEM_PROMPT)]}, {"role": "user", "content": content}]


class Qwen3VlReranker(Qwen3VlFamily):
    family = "Qwen3-VL-Reranker"
    capabilities = frozenset({Capability.SCORE})

    def __init__(self, spec: LoadSpec) -> None:
        generator = self._load(spec, self._processor_folder(spec))
        self._instruction = str(spec.loadtime.get("default_instruction") or DEFAULT_INSTRUCTION)
        rows = [self._token_id(token) for token in ("no", "yes")]
        head = generator.get_output_embeddings().weight
        self._head = head.detach()[rows].float().to(self.device)  # [no, yes] x hidden

    @staticmethod
    def _processor_folder(spec: LoadSpec) -> Path:
        """The weights' own folder when it has an image processor, else the base processor model's."""
        if (spec.weights / "preprocessor_config.json").is_file():
            return spec.weights
        base = spec.loadtime.get("base_processor_model")
        if not base or spec.fetch is None:
            raise ValueError(f"{spec.weights} has no image processor and names no base_processor_model")
        revision = spec.loadtime.get("base_processor_revision")
        return spec.fetch(str(base), str(revision) if revision else None, None)

    def _token_id(self, token: str) -> int:
        tokenizer = self._vlm.tokenizer
        found = tokenizer.convert_tokens_to_ids(token)
        if (
            found is None
            or found == tokenizer.unk_token_id
            or tokenizer.convert_ids_to_tokens(found) != token
        ):
            raise ValueError(f"{self.family}'s tokenizer has no '{token}' token to read its answer from")
        return int(found)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        asked_for = forward.task.instruction if forward.task else None
        instruction = asked_for or self._instruction
        instructed = self._vlm.count(asked_for, special_tokens=False) if asked_for else 0
        limit = self._limit(forward)
        prepared = []
        # A query is one object shared by all its documents' pairs (alive in ``inputs`` throughout,
        # so its identity is its key): decoded and resized once.
        queries: dict[int, tuple[Side, int]] = {}  # and the query's text tokens
        for one in inputs:
            if isinstance(one, MediaPair):
                asked, answer = one.query, one.document
            elif isinstance(one, tuple):
                asked, answer = one
            else:
                raise UnsupportedInput(f"{self.family} scores (query, document) pairs, not single items")
            if id(asked) not in queries:
                side = self._side(asked)
                queries[id(asked)] = side, self._vlm.count(side.text, special_tokens=False)
            (query, query_tokens), document = queries[id(asked)], self._side(answer)
            read = partial(_conversation, instruction, query, document.images)
            pictures = [*query.pictures, *document.pictures]
            tensors = self._vlm.read(read, document.text, pictures, limit, forward)
            if isinstance(tensors, ItemError):
                prepared.append(Prepared.refused(tensors))
                continue
            ids = tensors.input_ids.numpy()
            content = query_tokens + instructed + self._vlm.count(tensors.text, special_tokens=False)
            prepared.append(Prepared(ids, payload=tensors, content=min(content, len(ids))))
        return prepared

    def _side(self, one: str | ImageData) -> Side:
        """A side's text, images and pictures; a side with neither text nor image is the client's error."""
        if isinstance(one, ImageData):
            images = [page(one, self.family)]
            return Side(one.text or "", images, [self._vlm.picture(image) for image in images])
        if not one.strip():
            raise UnsupportedInput(
                f"{self.family} scores a query and documents that each have text or an image"
            )
        return Side(one, [], [])

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self._running():
            hidden, _ = self._states(batch)
            logits = hidden[:, -1].float() @ self._head.T  # padded on the left: [pairs, (no, yes)]
            scores = torch.sigmoid(logits[:, 1] - logits[:, 0])
            return BatchOutputs(scores=scores.cpu().numpy().astype(np.float32))

    def close(self) -> None:
        del self._head
        super().close()
