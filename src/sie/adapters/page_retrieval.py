"""What the visual document retrievers share (ColPali, ColQwen2.5): a page image becomes one vector per
image patch (and per token of the model's prompt), a text one per token, scored by late interaction
(MaxSim). A batch's pages go through the model's processor and forward together, its texts together;
every position's vector is L2-normalised (the public default, ``normalize: true``) and the padding's
are dropped, so an item's vectors do not depend on what it was batched with.

A text longer than the model's ``max_sequence_length`` is cut at a token boundary so that it and the
family's prompt fit, as the text families truncate; an unbounded query would otherwise run a
multi-billion-parameter decoder at quadratic cost until the device ran out of memory. Under
``options.overflow_policy: error`` such a text is refused instead (``INPUT_TOO_LONG``, its tokens and
the prompt's against the length). The processor's
fast tokenizer reconfigures itself (padding, truncation) on every call, and ``prepare`` runs on the
tokenizing threads while ``run`` runs on the worker's: one lock serialises the two.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Self

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from sie.adapters.batch import BatchOutputs, ImageData, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.images import decode_image
from sie.adapters.runtime.transformer import DeviceModel
from sie.adapters.runtime.window import refusal
from sie.core.extraction import ItemError
from sie.core.options import Capability, Modality
from sie.core.task import UnsupportedInput


class PageRetriever(DeviceModel, ABC):
    """A family loads its model and processor, and says how pages and texts are encoded and embedded."""

    request_options: frozenset[str] = frozenset()
    capabilities = frozenset({Capability.MULTIVECTOR})
    inputs = frozenset({Modality.TEXT, Modality.IMAGE})
    packs_tokens = False
    family: str
    _processor: Any  # the model's processor: ``tokenizer`` and ``__call__``

    def __init__(self, spec: LoadSpec) -> None:
        self._processing = threading.Lock()
        self._max_length = spec.max_seq_length
        self._prompt_tokens: int | None = None

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def _text(self, text: str) -> str:
        """What the processor is given for a text (the family's prompt around it, if it adds one)."""
        return text

    @abstractmethod
    def _page_cost(self, page: Image.Image) -> int:
        """The positions a page takes (its share of a batch's token budget); raises
        ``UnsupportedInput`` for a page the processor cannot read."""

    @abstractmethod
    def _encode_pages(self, pages: list[Image.Image]) -> Any:
        """The processor's tensors for ``pages``."""

    @abstractmethod
    def _encode_texts(self, texts: list[str]) -> Any:
        """The processor's tensors for ``texts`` (as ``prepare`` left them)."""

    @abstractmethod
    def _embeddings(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(rows, positions, dims) from the processor's tensors, on the device."""

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        prepared = []
        for one in inputs:
            if isinstance(one, ImageData):
                page = decode_image(one).convert("RGB")
                with self._processing:  # a family may count a page's tokens with the tokenizer
                    weight = self._page_cost(page)
                prepared.append(Prepared(payload=page, weight=weight, tokens=0))  # bills as an image
            elif isinstance(one, str):
                with self._processing:
                    cut = self._cut(one, forward)
                    if isinstance(cut, ItemError):
                        prepared.append(Prepared.refused(cut))
                        continue
                    text = self._text(cut)
                    ids = self._processor.tokenizer(text)["input_ids"]
                prepared.append(Prepared(np.asarray(ids, dtype=np.int64), payload=text))
            else:
                raise UnsupportedInput(f"{self.family} encodes a text query or a page image")
        return prepared

    def _cut(self, text: str, forward: Forward) -> str | ItemError:
        """``text`` up to the last whole token that, with the family's prompt, fits the length; its
        refusal instead when ``forward`` asks for it (``overflow_policy: error``)."""
        if self._max_length is None:
            return text
        if self._prompt_tokens is None:
            self._prompt_tokens = int(self._encode_texts([self._text("")])["input_ids"].shape[1])
        budget = max(self._max_length - self._prompt_tokens, 1)
        tokens = self._processor.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if len(tokens["input_ids"]) <= budget:
            return text
        if refused := refusal(forward, self._prompt_tokens + len(tokens["input_ids"]), self._max_length):
            return refused
        return text[: tokens["offset_mapping"][budget - 1][1]]

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        vectors: list[np.ndarray | None] = [None] * len(batch)
        pages = [row for row, item in enumerate(batch) if isinstance(item.payload, Image.Image)]
        texts = [row for row, item in enumerate(batch) if isinstance(item.payload, str)]
        encoders: list[tuple[list[int], Callable[[Any], Any]]] = [
            (pages, self._encode_pages),
            (texts, self._encode_texts),
        ]
        for rows, encode in encoders:
            if rows:
                with self._processing:
                    encoded = encode([batch[row].payload for row in rows])
                for row, item_vectors in zip(rows, self._vectors(encoded), strict=True):
                    vectors[row] = item_vectors
        return BatchOutputs(multivector=[v for v in vectors if v is not None])

    def _vectors(self, encoded: Any) -> list[np.ndarray]:
        inputs = self._moved(dict(encoded))
        with self._running():
            embeddings = self._embeddings(inputs)
        normalized = F.normalize(embeddings.float(), dim=-1).cpu().numpy()
        mask = inputs["attention_mask"].bool().cpu().numpy()
        return [rows[keep] for rows, keep in zip(normalized, mask, strict=True)]


class PromptedPageRetriever(PageRetriever):
    """colpali-engine's retrievers over a chat VLM (ColQwen2.5, ColSmol): a page is read behind the
    family's visual prompt, whose one image placeholder the processor expands; a text is followed by
    the query-augmentation tokens; both pad on the left, as colpali-engine's processors do."""

    visual_prompt: str
    query_suffix: str
    _prompt_length: int  # the visual prompt's tokens besides its one image placeholder

    def _use_processor(self, processor: Any) -> None:
        """Serve with ``processor``: left padding, and the visual prompt's own tokens counted once."""
        processor.tokenizer.padding_side = "left"
        self._processor = processor
        self._prompt_length = len(processor.tokenizer(self.visual_prompt)["input_ids"]) - 1

    def _text(self, text: str) -> str:
        return text + self.query_suffix

    def _encode_pages(self, pages: list[Image.Image]) -> Any:
        prompts = [self.visual_prompt] * len(pages)
        return self._processor(text=prompts, images=pages, padding="longest", return_tensors="pt")

    def _encode_texts(self, texts: list[str]) -> Any:
        return self._processor(text=texts, padding="longest", return_tensors="pt")
