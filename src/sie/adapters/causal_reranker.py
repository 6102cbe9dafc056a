"""Rerankers that are causal language models (Qwen3-Reranker, mxbai-rerank-v2): the model reads a
chat-formatted (query, document) prompt and the score is read from its next-token logits for a "yes"
and a "no" token.

Two prompt layouts, as the models were trained (``loadtime.input_format``):

- ``qwen3`` (Qwen3-Reranker's model card): a system turn asking for "yes" or "no", then
  ``<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {document}`` tokenized as one text and
  cut at the end to fit, then the assistant turn with an empty ``<think>`` block;
- ``mxbai`` (the ``mxbai-rerank`` library): ``query: {query}``, a newline, ``document: {document}``
  (the document cut to fit), a newline and the relevance task prompt, inside the chat turns.

Under ``options.overflow_policy: error`` a pair whose prompt would be cut is refused instead
(``INPUT_TOO_LONG``, its whole prompt's tokens against the window).

``score_mode`` ``logit_diff`` answers yes minus no (mxbai's raw score); ``log_softmax`` the
probability of yes against no (Qwen3's). Only the two vocabulary rows of the output head are
multiplied, in float32, with each pair's last hidden state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.transformer import TransformerAdapter
from sie.adapters.runtime.window import refusal
from sie.core.options import Capability
from sie.core.task import UnsupportedInput

QWEN3_INSTRUCTION: Final = "Given a web search query, retrieve relevant passages that answer the query"
_QWEN3_SYSTEM: Final = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
_MXBAI_TASK: Final = (
    "You are a search relevance expert who evaluates how well documents match search queries. For each "
    "query-document pair, carefully analyze the semantic relationship between them, then provide your "
    "binary relevance judgment (0 for not relevant, 1 for relevant).\nRelevance:"
)
_MXBAI_SYSTEM: Final = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


@dataclass(frozen=True)
class PromptFormat:
    system: str
    suffix: str
    yes: str
    no: str
    score_mode: str


FORMATS: Final = {
    "qwen3": PromptFormat(
        _QWEN3_SYSTEM,
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "yes",
        "no",
        "log_softmax",
    ),
    "mxbai": PromptFormat(_MXBAI_SYSTEM, "<|im_end|>\n<|im_start|>assistant\n", "1", "0", "logit_diff"),
}


class CausalLmReranker(TransformerAdapter):
    family = "CausalLmReranker"
    auto_class = AutoModelForCausalLM
    capabilities = frozenset({Capability.SCORE})

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        options = spec.loadtime
        name = str(options.get("input_format", "mxbai"))
        if name not in FORMATS:
            raise ValueError(f"input_format '{name}' is not one of {sorted(FORMATS)}")
        self._format = prompt = FORMATS[name]
        self._qwen3 = name == "qwen3"
        self._score_mode = str(options.get("score_mode", prompt.score_mode))
        if self._score_mode not in ("logit_diff", "log_softmax"):
            raise ValueError(f"score_mode '{self._score_mode}' is not logit_diff or log_softmax")
        self._instruction = str(options.get("default_instruction") or QWEN3_INSTRUCTION)
        self._plain = self.tokenizer.untruncated()  # pieces are cut here, by the layout's rule
        self._prefix = self._ids(f"<|im_start|>system\n{prompt.system}<|im_end|>\n<|im_start|>user\n")
        self._suffix = self._ids(prompt.suffix)
        self._sep = self._ids("\n")
        self._task = [] if self._qwen3 else self._ids(_MXBAI_TASK)
        rows = [
            self._first_id(str(options.get(key, default)))
            for key, default in (("no_token", prompt.no), ("yes_token", prompt.yes))
        ]
        head = self.backbone.model.get_output_embeddings().weight
        self._head = head.detach()[rows].float().to(self.backbone.device)  # [no, yes] x hidden
        self._max_length = spec.max_seq_length or int(self.backbone.model.config.max_position_embeddings)

    def _ids(self, text: str) -> list[int]:
        return [int(i) for i in self._plain.encode([text], special_tokens=False)[0]]

    def _first_id(self, token: str) -> int:
        ids = self._ids(token)
        if not ids:
            raise ValueError(f"the tokenizer has no token for {token!r}")
        return ids[0]

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        pairs = [one for one in inputs if isinstance(one, tuple)]
        if len(pairs) != len(inputs):
            raise UnsupportedInput("Causal-LM rerankers score (query, document) pairs, not single texts")
        counted = _Counted(self._ids)
        if self._qwen3:
            asked = forward.task.instruction if forward.task else None
            return [self._qwen3_pair(q, d, asked, counted, forward) for q, d in pairs]
        # mxbai's layout has no instruction slot (the public server ignores one there too).
        return [self._mxbai_pair(q, d, counted, forward) for q, d in pairs]

    def _qwen3_pair(
        self, query: str, document: str, asked: str | None, counted: _Counted, forward: Forward
    ) -> Prepared:
        """The pair in Qwen3's prompt, cut from the document's end to fit; its content is the query,
        the request's instruction (the default one is template) and what is left of the document."""
        instruction = asked or self._instruction
        body = self._ids(f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}")
        whole = len(self._prefix) + len(body) + len(self._suffix)
        if refused := refusal(forward, whole, self._max_length):
            return Prepared.refused(refused)
        room = max(self._max_length - len(self._prefix) - len(self._suffix), 0)
        ids = self._prefix + body[:room] + self._suffix
        caller = counted(query) + (counted(asked) if asked else 0)
        whole_document = counted(document)
        kept = max(min(whole_document, room - (len(body) - whole_document)), 0)
        return Prepared(np.asarray(ids, dtype=np.int64), content=min(len(ids), caller + kept))

    def _mxbai_pair(self, query: str, document: str, counted: _Counted, forward: Forward) -> Prepared:
        fixed = len(self._prefix) + len(self._sep) + len(self._task) + len(self._suffix)
        room = self._max_length - fixed  # what query, separator and document may use together
        query_ids, document_ids = self._ids(f"query: {query}"), self._ids(f"document: {document}")
        whole = fixed + len(query_ids) + len(self._sep) + len(document_ids)
        if refused := refusal(forward, whole, self._max_length):
            return Prepared.refused(refused)
        query_ids = query_ids[:room]
        document_ids = document_ids[: max(room - len(query_ids) - len(self._sep), 0)]
        body = (query_ids + self._sep + document_ids)[:room]
        ids = self._prefix + body + self._sep + self._task + self._suffix
        content = min(counted(query), len(query_ids)) + min(counted(document), len(document_ids))
        return Prepared(np.asarray(ids, dtype=np.int64), content=min(len(ids), content))

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self.backbone.running(forward.lora):
            hidden, tokens = self.backbone.token_states(batch)
            logits = hidden.index_select(0, tokens.lasts).float() @ self._head.T  # [pairs, (no, yes)]
            if self._score_mode == "log_softmax":
                scores = torch.log_softmax(logits, dim=-1)[:, 1].exp()
            else:
                scores = logits[:, 1] - logits[:, 0]
            return BatchOutputs(scores=scores.cpu().numpy())

    def close(self) -> None:
        del self._head
        super().close()


class _Counted:
    """A text's tokens alone (no special tokens), each distinct text counted once per request (a
    query recurs in every pair)."""

    def __init__(self, ids: Callable[[str], list[int]]) -> None:
        self._ids = ids
        self._seen: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        count = self._seen.get(text)
        if count is None:
            count = self._seen[text] = len(self._ids(text))
        return count
