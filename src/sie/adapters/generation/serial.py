"""One request at a time through transformers' own ``generate``: ``CausalLmGenerator``'s engine for the
models its continuous batching cannot run (hybrid models with linear-attention layers, whose recurrent
state the paged cache does not hold; Gemma 4, whose layers differ in key/value shape; vision-language
models transformers runs only whole).

Requests wait in order for one thread of their own, each decoded alone by ``generate`` with its
ordinary cache: nothing is batched, so a busy model answers one request after another (throughput is
one request's), but every architecture transformers generates with is served, with the same sampling
(``sampling.RowSampler`` as a logits processor over a greedy ``generate``, so a greedy request with no
extras is ``generate``'s own argmax), grammars, stop handling, deadlines and cancellation as the
batched engine. Tokens reach the event loop as ``generate`` streams them; a request closed while it
waits never starts, and one closed while it runs stops at its next token.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

import torch
from transformers import GenerationConfig, LogitsProcessor, StoppingCriteria
from transformers.generation.streamers import BaseStreamer

from sie.adapters.generation.grammar import Constraint
from sie.adapters.generation.progress import Progress
from sie.adapters.generation.sampling import RowSampler, Sampling


class SerialGeneration:
    """One request, queued or running (``progress.Generation``): ``generate``'s thread posts its
    progress to the event loop."""

    def __init__(self, owner: SerialGenerate, sampler: RowSampler) -> None:
        self.sampler = sampler
        self.cancelled = threading.Event()  # read by ``generate``'s stopping criterion
        self._owner = owner
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Progress] = asyncio.Queue()
        self._done = False

    def post(self, progress: Progress) -> None:
        """From ``generate``'s thread; nothing once the loop is gone (the server stopped)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, progress)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Progress:
        if self._done:
            raise StopAsyncIteration
        progress = await self._queue.get()
        if progress.finished:
            self._done = True
            self._owner.running -= 1
        return progress

    def close(self) -> None:
        """Stop generating (idempotent): a waiting request is skipped, a running one stops."""
        self.cancelled.set()
        if not self._done:
            self._done = True
            self._owner.running -= 1


class _Sample(LogitsProcessor):
    """The request's own choice of each token (``RowSampler``), left alone at the maximum of its row
    for the greedy ``generate`` to take."""

    def __init__(self, sampler: RowSampler) -> None:
        self._sampler = sampler

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if not self._sampler.untouched:
            self._sampler.choose(scores[0])
        return scores


class _Cancelled(StoppingCriteria):
    def __init__(self, cancelled: threading.Event) -> None:
        self._cancelled = cancelled

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> torch.BoolTensor:
        stop = self._cancelled.is_set()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)  # type: ignore[return-value]


class _Tokens(BaseStreamer):
    """Every token ``generate`` chose, posted with the logprobs chosen beside it; its first call is
    the prompt."""

    def __init__(self, generation: SerialGeneration) -> None:
        self._generation = generation
        self._prompt_seen = False
        self.tokens: list[int] = []

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.tokens += [int(t) for t in value.reshape(-1).tolist()]
        self._post(finished=False)

    def end(self) -> None:
        self._post(finished=True)

    def _post(self, finished: bool) -> None:
        logprobs = self._generation.sampler.logprobs_through(len(self.tokens))
        self._generation.post(Progress(list(self.tokens), logprobs, finished))


class SerialGenerate:
    def __init__(self, model: Any, eos: tuple[int, ...], pad: int, threads: int | None) -> None:
        self._model = model
        self._eos, self._pad = eos, pad
        self._executor = ThreadPoolExecutor(
            1, thread_name_prefix="sie-generate", initializer=_threads, initargs=(threads,)
        )
        self.running = 0  # generations queued or running, and not yet finished or cancelled
        self._live: set[SerialGeneration] = set()  # queued or running: ``close`` stops them all

    def start(
        self,
        prompt: list[int],
        max_new_tokens: int,
        sampling: Sampling,
        constraint: Constraint | None,
        pixels: dict[str, torch.Tensor] | None = None,
    ) -> SerialGeneration:
        """Queue a request (on the event loop: its progress is posted there); ``pixels``: a
        vision-language model's image tensors for the prompt's placeholders."""
        sampler = RowSampler(sampling, constraint, self._eos, prompt)
        generation = SerialGeneration(self, sampler)
        self._live.add(generation)
        self._executor.submit(self._run, generation, prompt, max_new_tokens, pixels or {})
        self.running += 1
        return generation

    def _run(
        self,
        generation: SerialGeneration,
        prompt: list[int],
        max_new_tokens: int,
        pixels: dict[str, torch.Tensor],
    ) -> None:
        stream = _Tokens(generation)
        try:
            if not generation.cancelled.is_set():
                self._generate(prompt, max_new_tokens, generation, stream, pixels)
        except Exception as exc:  # the request's answer; the thread serves the next one
            generation.post(Progress(list(stream.tokens), [], True, f"{type(exc).__name__}: {exc}"))
        finally:
            self._live.discard(generation)

    def _generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        generation: SerialGeneration | None,
        stream: Any,
        pixels: dict[str, torch.Tensor] | None = None,
    ) -> None:
        model = self._model
        ids = torch.tensor([prompt], dtype=torch.long, device=model.device)
        extra = {name: tensor.to(model.device) for name, tensor in (pixels or {}).items()}
        config = GenerationConfig(  # type: ignore[no-untyped-call]
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=list(self._eos) or None,
            pad_token_id=self._pad,
        )
        processors = [_Sample(generation.sampler)] if generation is not None else []
        stopping = [_Cancelled(generation.cancelled)] if generation is not None else []
        with torch.inference_mode():
            model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                generation_config=config,
                logits_processor=processors,
                stopping_criteria=stopping,
                streamer=stream,
                **extra,
            )

    def warm_up(self, prompt: list[int]) -> None:
        """One token, on the loading thread: the first request does not pay the first forward."""
        self._generate(prompt, 1, None, None)

    def close(self) -> None:
        """Stops every request (queued ones never start, the running one at its next token) and
        waits for the thread."""
        for generation in list(self._live):
            generation.cancelled.set()
        self._executor.shutdown(wait=True, cancel_futures=True)
        del self._model


def _threads(threads: int | None) -> None:
    """The generating thread's own OpenMP threads (a per-thread setting), as the loader set its own."""
    if threads:
        torch.set_num_threads(threads)
