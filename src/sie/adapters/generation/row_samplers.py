"""The continuous-batching logits processor that runs each request's own ``RowSampler``
(``sampling``). Imported only with the generator (``causal_lm``): its base class's module pulls in
transformers' generation stack, seconds of a server's start that a server without a generative model
need not pay."""

from __future__ import annotations

import threading
from typing import Any

import torch
from transformers.generation.continuous_batching.cb_logits_processors import (
    ContinuousBatchingLogitsProcessor,
)

from sie.adapters.generation.sampling import NO_SLOT, RowSampler


class RowSamplers(ContinuousBatchingLogitsProcessor):
    """Every running request's ``RowSampler`` by slot; installed once per batching manager."""

    supported_kwargs: dict[str, type] = {"sie_slot": int}  # noqa: RUF012 (the library's class attribute)
    ignored_kwargs: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._slots: dict[int, RowSampler] = {}
        self._next = 0
        self._lock = threading.Lock()

    def add(self, sampler: RowSampler) -> int:
        with self._lock:
            slot = self._next
            self._next = (self._next + 1) % 2_000_000_000
            self._slots[slot] = sampler
            return slot

    def remove(self, slot: int) -> None:
        with self._lock:
            self._slots.pop(slot, None)

    def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
        int32_tensor.fill_(NO_SLOT)

    def prepare_tensor_args(self, requests_with_new_token: list[Any]) -> torch.Tensor:
        slots = [r.state.logit_processor_kwargs.get("sie_slot", NO_SLOT) for r in requests_with_new_token]
        return torch.tensor(slots, dtype=torch.int32)

    def __call__(self, scores: torch.FloatTensor, tensor_arg: torch.Tensor) -> torch.FloatTensor:
        rows = tensor_arg[: scores.size(0)].tolist()
        with self._lock:
            samplers = [self._slots.get(slot) for slot in rows]
        for i, sampler in enumerate(samplers):
            if sampler is not None and not sampler.untouched:
                sampler.choose(scores[i])
        return scores
