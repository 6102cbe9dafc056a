"""``generate``: text from a generative model, as a stream of events every generation route reads.

A route turns its body into a ``GenerationAsk`` (a raw prompt, or chat messages the model's template
renders) and reads ``Delta`` events then one ``Finished``. Everything a request can be refused for is
checked before its first event (the model, the window, the grammar), so a route answers those with a
status; what fails later ends the stream with an ``InferenceFailed``. The model is held for the whole
stream: it is not evicted under a request, and a request the client abandons (the route stops reading)
is cancelled in the batch at once.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

import jsonschema

from sie.adapters.batch import ImageData
from sie.adapters.generation.grammar import Constraint, GrammarError, GrammarSpec
from sie.adapters.generation.sampling import Sampling, TokenLogprob
from sie.adapters.generation.text import TextStream
from sie.catalog.catalog import CatalogEntry
from sie.catalog.errors import InvalidInput, ModelNotServed
from sie.catalog.families import not_served
from sie.catalog.model_config import GENERATION_DEADLINES
from sie.core.task import UnsupportedInput
from sie.engine.errors import GenerationTimeout, InferenceFailed, InputTooLong, OutputParseError, Overloaded
from sie.engine.ops.parts import Parts

if TYPE_CHECKING:  # imported by ``start``: transformers' generation stack costs seconds at import
    from sie.adapters.generation.causal_lm import CausalLmGenerator
    from sie.adapters.generation.progress import Generation, Progress

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class GenerationAsk:
    """What to generate from, and how. Exactly one of ``prompt`` and ``messages``."""

    max_new_tokens: int | None
    prompt: str | None = None
    messages: Sequence[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    template_options: dict[str, Any] = field(default_factory=dict)  # the request's chat_template_kwargs
    sampling: dict[str, Any] = field(default_factory=dict)  # ``Sampling`` fields the request set
    stop: tuple[str, ...] = ()
    grammar: GrammarSpec | None = None
    strict: bool = False  # the finished output must parse / match, else OUTPUT_PARSE_ERROR
    images: tuple[ImageData, ...] = ()  # the chat's image parts, in order (a vision-language model)


@dataclass(frozen=True)
class Delta:
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Finished:
    text: str  # the whole output (after the stop sequence was cut)
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float
    elapsed_s: float


Event = Delta | Finished


@dataclass(frozen=True)
class Deadlines:
    """A profile's generation timeouts (``adapter_options.runtime``, the public field names), in
    seconds: the first token within ``first_chunk_s`` of the request's arrival (its queueing, template
    and prefill included), a stream's every next token within ``inter_chunk_s`` of the one before, and
    the end within ``overall_s``. A non-streaming answer has no chunks between, so only the first and
    the overall deadline hold it (the public server's 504). None is no limit."""

    first_chunk_s: float | None = None
    inter_chunk_s: float | None = None
    overall_s: float | None = None

    @classmethod
    def of(cls, runtime: Mapping[str, Any]) -> Deadlines:
        """From a profile's runtime options as the catalogue checked them (positive or absent)."""
        first, inter, overall = (runtime.get(key) for key in GENERATION_DEADLINES)
        return cls(
            float(first) if first is not None else None,
            float(inter) if inter is not None else None,
            float(overall) if overall is not None else None,
        )


def generator_entry(parts: Parts, model: str) -> CatalogEntry:
    """The entry serving ``model`` (a ``:profile`` variant included), if it is a served generative one."""
    entry = parts.admission.require(model)
    family = not_served(entry.profile.adapter_path)
    if family is not None:
        raise ModelNotServed(entry.name, entry.profile.adapter_path, family)
    if entry.config.tasks.generate is None:
        raise InvalidInput(f"Model '{entry.name}' does not support generation")
    return entry


async def start(parts: Parts, model: str, ask: GenerationAsk, wait_loaded: bool = False) -> Running:
    """Check the request and queue it: every refusal is raised here, before any event."""
    entry = generator_entry(parts, model)
    task = entry.config.tasks.generate
    assert task is not None
    if wait_loaded:
        await parts.registry.wait_loaded(entry.name)
    from sie.adapters.generation.causal_lm import CausalLmGenerator  # loaded with the model by now

    with ExitStack() as stack:
        held = stack.enter_context(parts.registry.hold(entry.name))
        adapter = held.model.adapter
        if not isinstance(adapter, CausalLmGenerator):
            raise InvalidInput(f"Model '{entry.name}' does not support generation")
        if adapter.running >= parts.registry.max_pending:  # every waiting one holds its prompt
            raise Overloaded(
                f"Model '{entry.name}' has {adapter.running} generations running or queued "
                f"(limit {parts.registry.max_pending}); retry later"
            )
        if ask.images and not adapter.takes_images:
            raise InvalidInput(
                f"Model '{entry.name}' generates from text only; image content parts are not supported"
            )
        started = time.perf_counter()
        prompt, pixels = await asyncio.to_thread(_prompt_ids, adapter, entry, ask)
        cap = task.max_output_tokens
        max_new = ask.max_new_tokens if ask.max_new_tokens is not None else cap
        if max_new > cap:
            raise InvalidInput(f"max_new_tokens {max_new} exceeds this model's limit of {cap}")
        window = min(task.context_length, adapter.context_length)
        if len(prompt) + max_new > window:
            raise InputTooLong(
                f"The prompt has {len(prompt)} tokens; with {max_new} new tokens it exceeds the model's "
                f"context of {window} tokens"
            )
        constraint = await _constraint(adapter, ask.grammar)
        generation = adapter.start(prompt, max_new, _sampling(entry, ask), constraint, pixels)
        tokens = parts.metrics.tokens.labels(entry.name)
        deadlines = Deadlines.of(entry.profile.runtime)
        return Running(stack.pop_all(), adapter, generation, ask, len(prompt), started, tokens.inc, deadlines)
    raise AssertionError("unreachable")


class Running:
    """A queued generation: read ``events`` once; ``close`` (also at the end of ``events``) cancels it
    if it is still running and releases the model."""

    def __init__(
        self,
        held: ExitStack,
        adapter: CausalLmGenerator,
        generation: Generation,
        ask: GenerationAsk,
        prompt_tokens: int,
        started: float,
        count_tokens: Callable[[int], None],
        deadlines: Deadlines = Deadlines(),
    ) -> None:
        self._held, self._adapter, self._generation = held, adapter, generation
        self._ask, self.prompt_tokens, self._started = ask, prompt_tokens, started
        self._count_tokens = count_tokens  # ``sie_tokens_total``: the prompt and the output
        self._deadlines = deadlines

    async def events(self, streamed: bool = True) -> AsyncIterator[Event]:
        """``streamed``: the events go out as they come, so ``inter_chunk_timeout_s`` holds too."""
        progress = within(self._generation, self._deadlines, self._started, streamed)
        try:
            async for event in _events(self._adapter, progress, self._ask, self.prompt_tokens, self._started):
                if isinstance(event, Finished):
                    self._count_tokens(event.prompt_tokens + event.completion_tokens)
                yield event
        finally:
            self.close()

    async def finished_with_logprobs(self) -> tuple[Finished, list[TokenLogprob]]:
        """The whole generation read to its end (the non-streaming answers), with every token's
        logprobs when they were asked for."""
        logprobs: list[TokenLogprob] = []
        async for event in self.events(streamed=False):
            if isinstance(event, Delta):
                logprobs += event.logprobs
            else:
                return event, logprobs
        raise InferenceFailed("The generation ended without a result")

    def piece(self, token: int) -> str:
        """A token's own text (logprobs name tokens by it)."""
        return self._adapter.piece(token)

    def close(self) -> None:
        self._generation.close()
        self._held.close()


def _prompt_ids(
    adapter: CausalLmGenerator, entry: CatalogEntry, ask: GenerationAsk
) -> tuple[list[int], dict[str, Any] | None]:
    """On a thread: a chat template and a long prompt's tokenization cost milliseconds, an image's
    decoding more. The prompt's ids, and the pixels of its images."""
    if ask.messages is not None:
        options = dict(
            entry.config.tasks.generate.chat_template_kwargs if entry.config.tasks.generate else {}
        )
        options |= entry.profile.chat_template_kwargs or {}
        options |= ask.template_options
        try:
            text = adapter.render_chat(ask.messages, ask.tools, options)
        except UnsupportedInput as exc:
            raise InvalidInput(str(exc)) from None
        except Exception as exc:  # the template refused the conversation (jinja's raise_exception)
            raise InvalidInput(f"The chat template could not render the messages: {exc}") from None
    else:
        text = ask.prompt or ""
    if ask.images:
        try:
            return adapter.with_images(text, ask.images)
        except UnsupportedInput as exc:
            raise InvalidInput(str(exc)) from None
        except ValueError as exc:  # the processor: placeholders and images that do not pair up
            raise InvalidInput(f"The images could not be read with the messages: {exc}") from None
    return adapter.encode(text), None


async def _constraint(adapter: CausalLmGenerator, grammar: GrammarSpec | None) -> Constraint | None:
    if grammar is None:
        return None
    try:
        compiled = await asyncio.to_thread(adapter.grammars.check, grammar)
    except GrammarError as exc:
        raise InvalidInput(f"Invalid {grammar.kind} grammar: {exc}") from None
    return adapter.grammars.constraint(compiled)


_SAMPLING_FIELDS = frozenset(f.name for f in fields(Sampling))
_DEFAULT_FIELDS = ("temperature", "top_p", "top_k")  # what a profile's ``default_sampling`` may set


def _sampling(entry: CatalogEntry, ask: GenerationAsk) -> Sampling:
    """The profile's ``default_sampling`` (the public runtime option), overlaid by the request's."""
    defaults = entry.profile.runtime.get("default_sampling") or {}
    chosen = {k: v for k, v in defaults.items() if k in _DEFAULT_FIELDS and v is not None}
    chosen |= {k: v for k, v in ask.sampling.items() if k in _SAMPLING_FIELDS and v is not None}
    return Sampling(**chosen)


async def within(
    generation: AsyncIterator[Progress], deadlines: Deadlines, started: float, streamed: bool
) -> AsyncIterator[Progress]:
    """``generation``'s progress, each awaited no longer than its deadline allows (``Deadlines``;
    ``started`` on the ``time.perf_counter`` clock); past one, ``GenerationTimeout``. The wait is
    bounded only around the await, never across a ``yield``: a slow reader is not the generation's
    delay."""
    limits = {
        "first_chunk_timeout_s": deadlines.first_chunk_s,
        "inter_chunk_timeout_s": deadlines.inter_chunk_s if streamed else None,
        "overall_timeout_s": deadlines.overall_s,
    }
    overall = started + deadlines.overall_s if deadlines.overall_s is not None else None

    def sooner(own: float | None, key: str) -> tuple[float | None, str]:
        if overall is not None and (own is None or overall <= own):
            return overall, "overall_timeout_s"
        return own, key

    first = limits["first_chunk_timeout_s"]
    due, key = sooner(started + first if first is not None else None, "first_chunk_timeout_s")
    while True:
        try:
            async with asyncio.timeout(None if due is None else max(0.0, due - time.perf_counter())) as limit:
                progress = await anext(generation)
        except StopAsyncIteration:
            return
        except TimeoutError:
            if not limit.expired():
                raise
            raise GenerationTimeout(
                f"The generation {_MISSED[key]} within {limits[key]:g} s (this model profile's {key}); "
                "it was cancelled"
            ) from None
        yield progress
        gap = limits["inter_chunk_timeout_s"]
        due, key = sooner(time.perf_counter() + gap if gap is not None else None, "inter_chunk_timeout_s")


_MISSED = {
    "first_chunk_timeout_s": "made no first token",
    "inter_chunk_timeout_s": "made no next token",
    "overall_timeout_s": "did not finish",
}


async def _events(
    adapter: CausalLmGenerator,
    generation: AsyncIterator[Progress],
    ask: GenerationAsk,
    prompt_tokens: int,
    started: float,
) -> AsyncIterator[Event]:
    text = TextStream(adapter.tokenizer.decode, ask.stop)
    first: float | None = None
    tokens: list[int] = []
    async for progress in generation:
        if progress.error is not None:
            raise InferenceFailed(f"Generation failed: {progress.error}")
        if first is None:
            first = time.perf_counter()
        tokens = progress.tokens
        delta = text.push(tokens, final=progress.finished)
        if delta or progress.logprobs:
            yield Delta(delta, tuple(progress.logprobs))
        if text.stopped or progress.finished:
            break
    ended = time.perf_counter()
    stopped = text.stopped or bool(tokens and tokens[-1] in adapter.eos)
    reason: FinishReason = "stop" if stopped else "length"
    if ask.strict and ask.grammar is not None:
        _check_strict(ask.grammar, text.text)
    yield Finished(text.text, reason, prompt_tokens, len(tokens), (first or ended) - started, ended - started)


def _check_strict(grammar: GrammarSpec, output: str) -> None:
    """``strict``: the finished output parses as JSON (a schema's) or matches the regex in full."""
    if grammar.kind in ("json_schema", "json_object"):
        try:
            parsed = json.loads(output)
        except ValueError:
            raise OutputParseError("The model's output is not valid JSON") from None
        if grammar.kind == "json_schema":
            try:
                jsonschema.validate(parsed, json.loads(grammar.text))
            except jsonschema.ValidationError as exc:
                raise OutputParseError(
                    f"The model's output does not match the schema: {exc.message}"
                ) from None
    elif grammar.kind == "regex" and re.fullmatch(grammar.text, output) is None:
        raise OutputParseError("The model's output does not match the regex")
