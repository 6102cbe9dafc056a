"""ColPali visual document retrieval: a page image becomes one vector per image patch (and per token of
the model's prompt), a text query one per token, scored against each other by late interaction
(MaxSim), as a ColBERT's.

transformers' ``ColPaliForRetrieval`` and ``ColPaliProcessor`` own the model: the processor puts an
image behind its image tokens and a query behind ``Question:`` with the query-augmentation tokens the
model was trained with, and the model projects every position to ``embedding_dim``. Each item keeps
the positions its attention mask covers (a batch's padding is dropped), each vector L2-normalised
(the public default, ``normalize: true``). Texts and images batch separately: a batch of pages is one
forward, a batch of queries another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Self

import numpy as np
import torch.nn.functional as F
from PIL import Image
from transformers import AutoTokenizer, ColPaliForRetrieval, ColPaliProcessor
from transformers.models.auto.image_processing_auto import AutoImageProcessor

from sie.adapters.base import (
    BatchOutputs,
    Forward,
    ImageData,
    LoadSpec,
    ModelInput,
    Prepared,
    UnsupportedInput,
)
from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.images import decode_image
from sie.adapters.transformer import DeviceModel
from sie.core.options import Capability, Modality, Pooling

NEEDS_INPUT: Final = "ColPali encodes a text query or a page image"


class ColPaliEncoder(DeviceModel):
    family = "ColPali"
    request_options: frozenset[str] = frozenset()
    capabilities = frozenset({Capability.MULTIVECTOR})
    inputs = frozenset({Modality.TEXT, Modality.IMAGE})
    default_pooling = Pooling.CLS  # unused: one vector per position
    packs_tokens = False

    def __init__(self, spec: LoadSpec) -> None:
        folder = str(spec.weights)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        images = AutoImageProcessor.from_pretrained(folder, backend="pil")  # type: ignore[no-untyped-call]
        self._processor = ColPaliProcessor(image_processor=images, tokenizer=tokenizer)
        self.tokenizer = TokenizerVocabulary(tokenizer)
        model: Any = ColPaliForRetrieval.from_pretrained(folder, dtype=self._place(spec))
        self.model = model.eval().to(self.device)
        self.dims = {Capability.MULTIVECTOR: int(model.config.embedding_dim)}
        self._image_cost = int(getattr(images, "image_seq_length", 0) or 1024)
        self._max_length = spec.max_seq_length

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        prepared = []
        for one in inputs:
            if isinstance(one, ImageData):
                prepared.append(Prepared(payload=decode_image(one).convert("RGB"), weight=self._image_cost))
            elif isinstance(one, str):
                ids = self._processor.tokenizer(one, add_special_tokens=True)["input_ids"]
                prepared.append(Prepared(np.asarray(ids, dtype=np.int64), payload=one))
            else:
                raise UnsupportedInput(NEEDS_INPUT)
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        vectors: list[np.ndarray | None] = [None] * len(batch)
        pages = [row for row, item in enumerate(batch) if isinstance(item.payload, Image.Image)]
        queries = [row for row, item in enumerate(batch) if isinstance(item.payload, str)]
        if pages:
            encoded = self._processor(images=[batch[row].payload for row in pages], return_tensors="pt")
            for row, rows in zip(pages, self._forward(encoded), strict=True):
                vectors[row] = rows
        if queries:
            texts = [batch[row].payload for row in queries]
            encoded = self._processor(text=texts, return_tensors="pt")
            for row, rows in zip(queries, self._forward(encoded), strict=True):
                vectors[row] = rows
        return BatchOutputs(multivector=[v for v in vectors if v is not None])

    def _forward(self, encoded: Any) -> list[np.ndarray]:
        inputs = self._moved({key: value for key, value in encoded.items() if key != "labels"})
        with self._running():
            embeddings = self.model(**inputs).embeddings
        normalized = F.normalize(embeddings.float(), dim=-1).cpu().numpy()
        mask = inputs["attention_mask"].bool().cpu().numpy()
        return [rows[keep] for rows, keep in zip(normalized, mask, strict=True)]
