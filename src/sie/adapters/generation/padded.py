"""Batches of the waiting requests through transformers' own ``generate``: ``CausalLmGenerator``'s engine
for the models its continuous batching cannot run (hybrid models with linear-attention layers, whose
recurrent state the paged cache does not hold; Gemma 4, whose layers differ in key/value shape;
vision-language models transformers runs only whole).

When the model's thread is free it takes the requests waiting, in arrival order and as many as the
key/value budget holds, and runs them as one left-padded batch of ``generate`` (the padding masked, so
each row's tokens are those it would get alone: the tests hold every architecture to that). Each row
keeps its own sampler (``sampling.RowSampler`` as a logits processor over a greedy ``generate``, so a
greedy request with no extras is ``generate``'s own argmax), grammar, token limit, stop and
cancellation: a row that ends leaves the batch's output at once, its answer complete, though its place
computes padding until the batch's last row ends. This is static batching: a request that arrives while
a batch runs waits for the next one, so a long generation holds back the requests behind it (the
continuous engine admits them at its next step). A request with images runs alone: its pixels belong
to one prompt. Tokens reach the event loop as ``generate`` streams them; a request closed while it
waits never starts, one closed while it runs stops at its next token.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

import torch
from transformers import GenerationConfig, LogitsProcessor, StoppingCriteria
from transformers.generation.streamers import BaseStreamer

from sie.adapters.generation.grammar import Constraint
from sie.adapters.generation.progress import Progress
from sie.adapters.generation.sampling import RowSampler, Sampling

# The most requests in one batch: each row's sampler and stop run in Python at every step.
_MAX_ROWS = 32
# How long a batch may wait for as many requests as the last one ran: the rows of a batch end together
# and their clients send their next requests a few milliseconds apart; a batch that left before the
# last of them arrived would make those wait for all of its steps (a lone client never waits here).
_FILL_S = 0.02


class PaddedGeneration:
    """One request, waiting or running (``progress.Generation``): ``generate``'s thread posts its
    progress to the event loop."""

    def __init__(self, owner: PaddedBatches, sampler: RowSampler) -> None:
        self.sampler = sampler
        self.cancelled = threading.Event()  # read by the batch's stopping criterion
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


class _Row:
    """A request's place in a batch, on ``generate``'s thread: its tokens so far and whether it still
    runs."""

    def __init__(
        self,
        generation: PaddedGeneration,
        prompt: list[int],
        max_new_tokens: int,
        pixels: dict[str, torch.Tensor],
    ) -> None:
        self.generation = generation
        self.prompt, self.max_new_tokens, self.pixels = prompt, max_new_tokens, pixels
        self.tokens: list[int] = []
        self.live = True

    def add(self, token: int) -> None:
        self.tokens.append(token)
        self._post(finished=False)

    def finish(self, error: str | None = None) -> None:
        if self.live:
            self.live = False
            self._post(finished=True, error=error)

    def _post(self, finished: bool, error: str | None = None) -> None:
        logprobs = self.generation.sampler.logprobs_through(len(self.tokens))
        self.generation.post(Progress(list(self.tokens), logprobs, finished, error))


class _Sample(LogitsProcessor):
    """Each running row's own choice of its token (``RowSampler``), left alone at the maximum of the
    row for the greedy ``generate`` to take."""

    def __init__(self, rows: list[_Row]) -> None:
        self._rows = rows

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for i, row in enumerate(self._rows):
            sampler = row.generation.sampler
            if row.live and not sampler.untouched:
                sampler.choose(scores[i])
        return scores


class _Stop(StoppingCriteria):
    """Ends each row at its end-of-sequence token, its own token limit or its cancellation, and posts
    its last progress then (the batch may run on for the other rows)."""

    def __init__(self, rows: list[_Row], eos: tuple[int, ...]) -> None:
        self._rows, self._eos = rows, frozenset(eos)

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> torch.BoolTensor:
        for row in self._rows:
            if row.live and (
                row.generation.cancelled.is_set()
                or len(row.tokens) >= row.max_new_tokens
                or (row.tokens and row.tokens[-1] in self._eos)
            ):
                row.finish()
        done = [not row.live for row in self._rows]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)  # type: ignore[return-value]


class _Tokens(BaseStreamer):
    """Every step's tokens, one per row, given to the rows still running; the first call is the
    prompt."""

    def __init__(self, rows: list[_Row]) -> None:
        self._rows = rows
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for row, token in zip(self._rows, value.reshape(-1).tolist(), strict=True):
            if row.live:
                row.add(int(token))

    def end(self) -> None:
        for row in self._rows:
            row.finish()


class PaddedBatches:
    def __init__(
        self, model: Any, eos: tuple[int, ...], pad: int, threads: int | None, kv_tokens: int
    ) -> None:
        self._model = model
        self._eos, self._pad = eos, pad
        self._kv_tokens = kv_tokens  # a batch's rows x (longest prompt + most new tokens) stays within
        self._executor = ThreadPoolExecutor(
            1, thread_name_prefix="sie-generate", initializer=_threads, initargs=(threads,)
        )
        self._waiting: deque[_Row] = deque()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._last_rows = 1  # of the last batch: how many requests the next one waits ``_FILL_S`` for
        self.running = 0  # generations waiting or running, and not yet finished or cancelled
        self._live: set[PaddedGeneration] = set()  # waiting or running: ``close`` stops them all

    def start(
        self,
        prompt: list[int],
        max_new_tokens: int,
        sampling: Sampling,
        constraint: Constraint | None,
        pixels: dict[str, torch.Tensor] | None = None,
    ) -> PaddedGeneration:
        """Queue a request (on the event loop: its progress is posted there); ``pixels``: a
        vision-language model's image tensors for the prompt's placeholders."""
        sampler = RowSampler(sampling, constraint, self._eos, prompt)
        generation = PaddedGeneration(self, sampler)
        self._live.add(generation)
        with self._arrived:
            self._waiting.append(_Row(generation, prompt, max_new_tokens, pixels or {}))
            self._arrived.notify()
        # One turn of the thread per request: each turn takes at least one waiting request, so none is
        # left behind, and a turn that finds the queue emptied by an earlier one returns at once.
        self._executor.submit(self._run_waiting)
        self.running += 1
        return generation

    def _take(self) -> list[_Row]:
        """The next batch: waiting requests in order while the budget holds them; one with images
        alone. Requests closed while waiting leave here without running."""
        rows: list[_Row] = []
        longest = most = 0
        with self._arrived:
            deadline = time.monotonic() + _FILL_S
            while self._waiting and len(self._waiting) < self._last_rows:
                left = deadline - time.monotonic()
                if left <= 0 or not self._arrived.wait(left):
                    break
            while self._waiting and len(rows) < _MAX_ROWS:
                row = self._waiting[0]
                if row.generation.cancelled.is_set():
                    self._waiting.popleft()
                    self._live.discard(row.generation)
                    continue
                if rows and (row.pixels or rows[0].pixels):
                    break
                wide = max(longest, len(row.prompt)) + max(most, row.max_new_tokens)
                if rows and (len(rows) + 1) * wide > self._kv_tokens:
                    break
                rows.append(self._waiting.popleft())
                longest, most = max(longest, len(row.prompt)), max(most, row.max_new_tokens)
            if rows:  # a turn that found the queue emptied by an earlier one leaves it alone
                self._last_rows = len(rows)
        return rows

    def _run_waiting(self) -> None:
        rows = self._take()
        if not rows:
            return
        try:
            self._generate(rows)
        except Exception as exc:  # the batch's answer; the thread serves the next one
            for row in rows:
                row.finish(f"{type(exc).__name__}: {exc}")
        finally:
            for row in rows:
                self._live.discard(row.generation)

    def _generate(self, rows: list[_Row]) -> None:
        model = self._model
        longest = max(len(row.prompt) for row in rows)
        ids = torch.tensor(
            [[self._pad] * (longest - len(row.prompt)) + row.prompt for row in rows],
            dtype=torch.long,
            device=model.device,
        )
        mask = torch.tensor(
            [[0] * (longest - len(row.prompt)) + [1] * len(row.prompt) for row in rows],
            dtype=torch.long,
            device=model.device,
        )
        extra = {name: tensor.to(model.device) for name, tensor in rows[0].pixels.items()}
        config = GenerationConfig(  # type: ignore[no-untyped-call]
            do_sample=False,
            max_new_tokens=max(row.max_new_tokens for row in rows),
            eos_token_id=list(self._eos) or None,
            pad_token_id=self._pad,
        )
        with torch.inference_mode():
            model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=config,
                logits_processor=[_Sample(rows)],
                stopping_criteria=[_Stop(rows, self._eos)],
                streamer=_Tokens(rows),
                **extra,
            )

    def warm_up(self, prompt: list[int]) -> None:
        """One token, on the loading thread: the first request does not pay the first forward."""
        model = self._model
        ids = torch.tensor([prompt], dtype=torch.long, device=model.device)
        config = GenerationConfig(  # type: ignore[no-untyped-call]
            do_sample=False, max_new_tokens=1, pad_token_id=self._pad
        )
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)

    def close(self) -> None:
        """Stops every request (waiting ones never start, running ones at their next token) and waits
        for the thread."""
        for generation in list(self._live):
            generation.cancelled.set()
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self._lock:  # left behind by the turns just cancelled: their readers get an end
            left, self._waiting = list(self._waiting), deque()
        for row in left:
            row.finish("the model was unloaded before this request started")
        del self._model


def _threads(threads: int | None) -> None:
    """The generating thread's own OpenMP threads (a per-thread setting), as the loader set its own."""
    if threads:
        torch.set_num_threads(threads)
