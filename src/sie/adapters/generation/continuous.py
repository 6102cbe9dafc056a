"""transformers' continuous batching for one generative model (``CausalLmGenerator``'s engine wherever
the paged cache holds the model).

One ``ContinuousBatchingManager`` per loaded model: a paged KV cache sized from the profile's
``kv_budget_tokens`` and a thread of the library's own that admits new requests into the running batch
at every step. Requests reach it from the event loop (``start``); each answers through an asyncio queue
fed on the loop by the manager's result handler, one ``Progress`` per token. The sampling of each
request is ours (``row_samplers.RowSamplers``), the batching, the cache and the forward the library's.

The manager's thread runs the forwards, not the engine's device thread: on a CPU host a generation and
an embedding batch running at once share the cores. CUDA graphs and the asynchronous batching are off:
a request's grammar needs the token just chosen before the next step's mask is computed.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Mapping
from typing import Any, Self

from transformers import ContinuousBatchingConfig, GenerationConfig
from transformers.generation.continuous_batching.requests import GenerationOutput, RequestStatus

from sie.adapters.generation.grammar import Constraint
from sie.adapters.generation.progress import Progress
from sie.adapters.generation.row_samplers import RowSamplers
from sie.adapters.generation.sampling import RowSampler, Sampling

_BLOCK_TOKENS = 32  # the paged cache's block: small, so short requests waste little of the budget
_DEFAULT_KV_TOKENS = 8192


class BatchedGeneration:
    """One request in the manager (``progress.Generation``)."""

    def __init__(self, owner: ContinuousBatching, request_id: str, slot: int, sampler: RowSampler) -> None:
        self.request_id = request_id
        self._owner, self._slot, self._sampler = owner, slot, sampler
        self._queue: asyncio.Queue[GenerationOutput] = asyncio.Queue()
        self._done = False

    def deliver(self, output: GenerationOutput) -> None:
        self._queue.put_nowait(output)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Progress:
        if self._done:
            raise StopAsyncIteration
        output = await self._queue.get()
        finished = output.is_finished() or output.status is RequestStatus.FAILED or output.error is not None
        logprobs = self._sampler.logprobs_through(len(output.generated_tokens))
        if finished:
            self._done = True
            self._owner.forget(self._slot)
            self._owner.running -= 1
        return Progress(list(output.generated_tokens), logprobs, finished, output.error)

    def close(self) -> None:
        """Stop generating (idempotent); a finished request has nothing left to cancel."""
        if not self._done:
            self._done = True
            self._owner.cancel(self.request_id, self._slot)
            self._owner.running -= 1


def kv_budget_tokens(loadtime: Mapping[str, Any]) -> int:
    """The profile's ``kv_budget_tokens``: the tokens a model's key/value cache holds, whichever engine
    runs it."""
    return int(loadtime.get("kv_budget_tokens") or _DEFAULT_KV_TOKENS)


class ContinuousBatching:
    def __init__(self, model: Any, eos: tuple[int, ...], pad: int, loadtime: Mapping[str, Any]) -> None:
        kv_tokens = kv_budget_tokens(loadtime)
        max_batch_tokens = int(loadtime.get("max_batch_tokens") or min(kv_tokens, 2048))
        generation = GenerationConfig(  # type: ignore[no-untyped-call]
            do_sample=False, eos_token_id=list(eos) or None, pad_token_id=pad
        )
        batching = ContinuousBatchingConfig(
            block_size=_BLOCK_TOKENS,
            num_blocks=math.ceil(kv_tokens / _BLOCK_TOKENS),
            max_batch_tokens=max_batch_tokens,
            max_memory_percent=0.9,
            use_cuda_graph=False,
            use_async_batching=False,
            allow_block_sharing=False,
        )
        manager = model.init_continuous_batching(
            generation_config=generation, continuous_batching_config=batching
        )
        self._samplers = RowSamplers()
        # Our sampler joins the manager's processors before its first batch sizes their arguments.
        processors = manager.logit_processor
        processors.logits_processor.append(self._samplers)
        processors.tensors_required += 1
        processors.supported_keys.update(self._samplers.supported_kwargs)
        processors.do_processing = True
        manager.start()
        self._manager = manager
        self._eos = eos
        self._ids = itertools.count()
        self.running = 0  # generations started and not yet finished or cancelled (the queue depth)

    def start(
        self, prompt: list[int], max_new_tokens: int, sampling: Sampling, constraint: Constraint | None
    ) -> BatchedGeneration:
        """Queue a request (on the event loop: its results arrive there)."""
        if not self._manager.is_running():  # its thread died of an error it logged: nothing would answer
            raise RuntimeError(f"the generation loop of this model has stopped: {self._manager.fatal_error}")
        sampler = RowSampler(sampling, constraint, self._eos, prompt)
        slot = self._samplers.add(sampler)
        request_id = f"sie-{next(self._ids)}"
        generation = BatchedGeneration(self, request_id, slot, sampler)
        self._manager.register_result_handler(request_id, generation.deliver)
        try:
            self._manager.add_request(
                prompt, request_id=request_id, max_new_tokens=max_new_tokens, streaming=True, sie_slot=slot
            )
        except BaseException:
            self.cancel(request_id, slot)
            raise
        self.running += 1
        return generation

    def forget(self, slot: int) -> None:
        self._samplers.remove(slot)

    def cancel(self, request_id: str, slot: int) -> None:
        self._manager.cancel_request(request_id)
        router = self._manager.output_router
        with router._lock:  # a cancelled request gets no final output to remove its handler
            router.result_handlers.pop(request_id, None)
        self._samplers.remove(slot)

    def warm_up(self, prompt: list[int]) -> None:
        """One token through the manager, so its cache and first batch are not paid by a user."""
        request_id = self._manager.add_request(prompt, max_new_tokens=1)
        self._manager.get_result(request_id, timeout=120)

    def close(self) -> None:
        self._manager.stop(block=True, timeout=30)
        self._manager.destroy()
        del self._manager
