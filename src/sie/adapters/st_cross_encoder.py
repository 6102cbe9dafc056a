"""Rerankers saved as a sentence-transformers ``CrossEncoder`` of their own modules (zerank-2): a
causal LM reads each (query, document) pair through the publisher's chat template, and a
``LogitScore`` module turns the next-token logits into the score, under the saved activation.

sentence-transformers runs them, as the publisher does: ``CrossEncoder.preprocess`` renders and
left-pads the rows and ``predict`` applies the saved modules, so nothing of the template or of the
scoring is written again here. A row is never truncated: cutting it would drop the template's end
(the generation prompt the score is read after), so a pair longer than the model's context is the
client's error: 400 ``INPUT_TOO_LONG``, as the public server answers it, whatever ``overflow_policy``.

``usage`` bills the whole row and tells its ``content``: the request's instruction, the query and the
document, each tokenized alone (the rest of the row is the publisher's template).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np
from sentence_transformers import CrossEncoder
from tokenizers import Tokenizer

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.contract import TEXT_ONLY, Forward, LoadSpec
from sie.adapters.cross_encoder import instructed_pairs
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.transformer import DeviceModel
from sie.core.extraction import ItemError
from sie.core.options import Capability
from sie.wire.errors import ErrorCode


def _past_context(tokens: int, context: int) -> ItemError:
    return ItemError(
        ErrorCode.INPUT_TOO_LONG.value,
        f"The (query, document) pair takes {tokens} tokens with its template, past this reranker's "
        f"{context}-token context; shorten the query or the document",
    )


class SentenceTransformersCrossEncoder(DeviceModel):
    family = "CrossEncoder"
    request_options: frozenset[str] = frozenset()
    capabilities = frozenset({Capability.SCORE})
    inputs = TEXT_ONLY
    packs_tokens = False

    def __init__(self, spec: LoadSpec) -> None:
        weights_dtype = self._place(spec)
        self._context = spec.max_seq_length
        self.model: Any = CrossEncoder(
            str(spec.weights),
            device=spec.device,
            max_length=spec.max_seq_length,
            local_files_only=True,
            trust_remote_code=False,
            model_kwargs={"dtype": weights_dtype},
        )
        self.model.eval()
        transformer = self.model[0]  # rows are whole or refused (see the module docstring)
        processing = dict(transformer.processing_kwargs or {})
        processing["text"] = {**processing.get("text", {}), "truncation": False}
        transformer.processing_kwargs = processing
        self.tokenizer = TokenizerVocabulary(self.model.tokenizer)
        # Counts the caller's parts alone, apart from the tokenizer ``preprocess`` sets padding on.
        self._counter = TextTokenizer(
            Tokenizer.from_str(self.model.tokenizer.backend_tokenizer.to_str()), None
        )

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        pairs = instructed_pairs(inputs, forward)
        features = self.model.preprocess(pairs)  # every row rendered and tokenized in one call
        contents = self._contents(inputs, forward)
        prepared = []
        for pair, row, mask, content in zip(
            pairs, features["input_ids"], features["attention_mask"], contents, strict=True
        ):
            ids = row[mask.bool()].numpy().astype(np.int64)
            if self._context is not None and len(ids) > self._context:  # the public 400 INPUT_TOO_LONG
                prepared.append(Prepared.refused(_past_context(len(ids), self._context)))
            else:
                prepared.append(Prepared(ids=ids, payload=pair, content=min(content, len(ids))))
        return prepared

    def _contents(self, inputs: Sequence[ModelInput], forward: Forward) -> list[int]:
        """Each pair's caller text in tokens: instruction, query and document tokenized alone."""
        instruction = forward.task.instruction if forward.task else None
        asked = len(self._counter.encode([instruction], special_tokens=False)[0]) if instruction else 0
        texts = [text for pair in inputs if isinstance(pair, tuple) for text in pair]
        counts = [len(ids) for ids in self._counter.encode(texts, special_tokens=False)]
        return [asked + query + document for query, document in zip(counts[::2], counts[1::2], strict=True)]

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self._running():
            scores = self.model.predict(
                [item.payload for item in batch],
                batch_size=len(batch),
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return BatchOutputs(scores=np.asarray(scores, dtype=np.float32).reshape(-1))
