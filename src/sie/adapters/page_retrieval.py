"""What the visual document retrievers share (ColPali, ColQwen2.5): a page image becomes one vector per
image patch (and per token of the model's prompt), a text one per token, scored by late interaction
(MaxSim). A batch's pages go through the model's processor and forward together, its texts together;
every position's vector is L2-normalised (the public default, ``normalize: true``) and the padding's
are dropped, so an item's vectors do not depend on what it was batched with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from sie.adapters.base import (
    BatchOutputs,
    Forward,
    ImageData,
    LoadSpec,
    ModelInput,
    Prepared,
    UnsupportedInput,
)
from sie.adapters.images import decode_image
from sie.adapters.transformer import DeviceModel
from sie.core.options import Capability, Modality, Pooling


class PageRetriever(DeviceModel):
    """A family says how its processor encodes pages and texts and how its model embeds them."""

    request_options: frozenset[str] = frozenset()
    capabilities = frozenset({Capability.MULTIVECTOR})
    inputs = frozenset({Modality.TEXT, Modality.IMAGE})
    default_pooling = Pooling.CLS  # unused: one vector per position
    packs_tokens = False
    family: str
    _processor: Any  # the model's processor: ``tokenizer`` and ``__call__``

    def __init__(self, spec: LoadSpec) -> None:
        raise NotImplementedError

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def _text(self, text: str) -> str:
        """What the processor is given for a text (the family's prompt around it, if it adds one)."""
        return text

    def _page_cost(self, page: Image.Image) -> int:
        """The positions a page takes: its share of a batch's token budget."""
        raise NotImplementedError

    def _encode_pages(self, pages: list[Image.Image]) -> Any:
        """The processor's tensors for ``pages``."""
        raise NotImplementedError

    def _encode_texts(self, texts: list[str]) -> Any:
        """The processor's tensors for ``texts`` (as ``prepare`` left them)."""
        raise NotImplementedError

    def _embeddings(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(rows, positions, dims) from the processor's tensors, on the device."""
        raise NotImplementedError

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        prepared = []
        for one in inputs:
            if isinstance(one, ImageData):
                page = decode_image(one).convert("RGB")
                prepared.append(Prepared(payload=page, weight=self._page_cost(page)))
            elif isinstance(one, str):
                text = self._text(one)
                ids = self._processor.tokenizer(text)["input_ids"]
                prepared.append(Prepared(np.asarray(ids, dtype=np.int64), payload=text))
            else:
                raise UnsupportedInput(f"{self.family} encodes a text query or a page image")
        return prepared

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
