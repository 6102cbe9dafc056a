"""ColPali visual document retrieval (``page_retrieval`` says what the page retrievers share).

transformers' ``ColPaliForRetrieval`` and ``ColPaliProcessor`` own the model: the processor puts an
image behind its image tokens and a query behind ``Question:`` with the query-augmentation tokens the
model was trained with, and the model projects every position to ``embedding_dim``.
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image
from transformers import AutoTokenizer, ColPaliForRetrieval, ColPaliProcessor
from transformers.models.auto.image_processing_auto import AutoImageProcessor

from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.contract import LoadSpec
from sie.adapters.page_retrieval import PageRetriever
from sie.core.options import Capability


class ColPaliEncoder(PageRetriever):
    family = "ColPali"

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        folder = str(spec.weights)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        images = AutoImageProcessor.from_pretrained(folder, backend="pil")  # type: ignore[no-untyped-call]
        self._processor = ColPaliProcessor(image_processor=images, tokenizer=tokenizer)
        self.tokenizer = TokenizerVocabulary(tokenizer)
        model: Any = ColPaliForRetrieval.from_pretrained(folder, dtype=self._place(spec))
        self.model = model.eval().to(self.device)
        self.dims = {Capability.MULTIVECTOR: int(model.config.embedding_dim)}
        self._image_cost = int(getattr(images, "image_seq_length", 0) or 1024)

    def _page_cost(self, page: Image.Image) -> int:
        return self._image_cost  # the processor's image tokens, whatever the page's size

    def _encode_pages(self, pages: list[Image.Image]) -> Any:
        return self._processor(images=pages, return_tensors="pt")

    def _encode_texts(self, texts: list[str]) -> Any:
        return self._processor(text=texts, return_tensors="pt")

    def _embeddings(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        embeddings: torch.Tensor = self.model(**{k: v for k, v in inputs.items() if k != "labels"}).embeddings
        return embeddings
