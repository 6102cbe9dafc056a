"""Generative models transformers' continuous batching cannot run, served by transformers' own
``generate`` over left-padded batches of the waiting requests (``sie.adapters.generation.padded``) and
held to it.

Small random models built from each architecture's config (tests/builders.py): Qwen3.5's hybrid
(Gated DeltaNet linear-attention layers, whose recurrent state the paged cache does not hold),
Gemma 4 shaped as E2B (global layers with wider heads than the sliding ones; run as its language model
alone, against the whole multimodal model's ``generate``), Qwen3-VL (no causal-LM class: the whole
model, text in) and GLM-5.3-Flash (``glm5_next``: Kimi-delta linear attention, DeepSeek sparse
attention, experts; the whole model). Greedy output equal to ``generate`` alone, token for token, for a
request alone and inside a batch of prompts of other lengths and token limits; rows that end early
(a grammar's end, a limit, a close) beside rows that run on; the key/value budget splitting a queue
into batches; tokens streamed one at a time; the per-request sampler, a grammar, cancellation and
close; Qwen3-VL and GLM-5.3 reading a chat's images, a request with images in a batch of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer
from transformers.models.glm5_next.image_processing_pil_glm5_next import Glm5NextImageProcessorPil
from transformers.models.glm5_next.processing_glm5_next import Glm5NextProcessor

from sie.adapters.batch import ImageData
from sie.adapters.contract import LoadSpec
from sie.adapters.generation import padded
from sie.adapters.generation.causal_lm import CausalLmGenerator, unpaged_reason
from sie.adapters.generation.grammar import GrammarSpec
from sie.adapters.generation.padded import PaddedBatches
from sie.adapters.generation.progress import Generation, Progress
from sie.adapters.generation.sampling import Sampling
from sie.adapters.qwen3_vl import load_processor, page
from sie.core.options import ComputePrecision
from sie.core.task import UnsupportedInput
from tests import builders
from tests.adapters.test_generation import PROMPTS, _reference, _tokens
from tests.conftest import random_png

NEW_TOKENS = 16


def _qwen3_5(folder: Path, splade_dir: Path) -> Path:
    return builders.generative(folder, "Qwen3_5Text")


def _gemma4(folder: Path, splade_dir: Path) -> Path:
    return builders.gemma4(folder)


def _qwen3_vl(folder: Path, splade_dir: Path) -> Path:
    return builders.qwen3_vl(splade_dir, folder)


def _glm5_next(folder: Path, splade_dir: Path) -> Path:
    return builders.glm5_next(folder)


# Each architecture: its builder, what transformers loads it as for the reference, and why the paged
# cache cannot hold it.
ARCHITECTURES: dict[str, tuple[Callable[[Path, Path], Path], type, str]] = {
    "Qwen3_5Text": (_qwen3_5, AutoModelForCausalLM, "linear_attention layers"),
    "Gemma4": (_gemma4, AutoModelForImageTextToText, "sets head_dim per layer"),
    "Qwen3VL": (_qwen3_vl, AutoModelForImageTextToText, "only whole, with no causal-LM class"),
    "Glm5Next": (_glm5_next, AutoModelForImageTextToText, "linear_attention"),
}


def _load(folder: Path) -> CausalLmGenerator:
    spec = LoadSpec(weights=folder, device="cpu", precision=ComputePrecision.FLOAT32, max_seq_length=1024)
    return CausalLmGenerator.load(spec)


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def unpaged(request, tmp_path_factory, splade_dir) -> Iterator[tuple[str, Path, CausalLmGenerator]]:
    build = ARCHITECTURES[request.param][0]
    folder = build(tmp_path_factory.mktemp("unpaged") / request.param, splade_dir)
    generator = _load(folder)
    yield request.param, folder, generator
    generator.close()


@contextlib.contextmanager
def _batches(engine: PaddedBatches, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The rows of each ``generate`` the engine runs, its thread held until the block ends, so every
    request started inside the block waits for the same turn."""
    sizes: list[int] = []
    generate = engine._model.generate

    def counted(*args: Any, **kwargs: Any) -> Any:
        sizes.append(int(kwargs["input_ids"].shape[0]))
        return generate(*args, **kwargs)

    monkeypatch.setattr(engine._model, "generate", counted)
    release = threading.Event()
    engine._executor.submit(release.wait)
    try:
        yield sizes
    finally:
        release.set()


async def _last(generation: Generation) -> Progress:
    last = None
    async for progress in generation:
        last = progress
    assert last is not None and last.finished
    return last


def test_greedy_equals_generate_alone_and_inside_a_padded_batch(unpaged, monkeypatch) -> None:
    """Prompts of different lengths (left-padded to the longest) and token limits in one batch: each
    row's tokens are ``generate``'s for its prompt alone, cut at its own limit."""
    name, folder, generator = unpaged
    _, auto, why = ARCHITECTURES[name]
    engine = generator._engine
    assert isinstance(engine, PaddedBatches)
    assert generator.unpaged_because is not None and why in generator.unpaged_because
    want = _reference(folder, PROMPTS, NEW_TOKENS, auto)
    limits = [NEW_TOKENS, 5, NEW_TOKENS, 9]

    async def run() -> tuple[list[int], list[list[int]]]:
        alone = await _tokens(generator, PROMPTS[0], NEW_TOKENS, Sampling())
        with _batches(engine, monkeypatch) as sizes:
            batch = [
                generator.start(generator.encode(p), n, Sampling(), None)
                for p, n in zip(PROMPTS, limits, strict=True)
            ]
        together = await asyncio.gather(*map(_last, batch))
        assert sizes == [len(PROMPTS)]
        return alone.tokens, [t.tokens for t in together]

    alone, together = asyncio.run(run())
    assert alone == want[0]
    assert together == [tokens[:n] for tokens, n in zip(want, limits, strict=True)]
    assert generator.running == 0


def test_what_continuous_batching_runs_stays_on_it(tmp_path) -> None:
    config = AutoConfig.from_pretrained(builders.generative(tmp_path / "qwen3", "Qwen3"))
    assert unpaged_reason(config) is None


@pytest.fixture(scope="module")
def qwen3_5(tmp_path_factory) -> Iterator[CausalLmGenerator]:
    generator = _load(builders.generative(tmp_path_factory.mktemp("qwen3_5") / "m", "Qwen3_5Text"))
    yield generator
    generator.close()


def test_tokens_arrive_one_at_a_time(qwen3_5) -> None:
    async def run() -> list[list[int]]:
        seen = []
        async for progress in qwen3_5.start(qwen3_5.encode(PROMPTS[1]), NEW_TOKENS, Sampling(), None):
            seen.append(progress.tokens)
        return seen

    seen = asyncio.run(run())
    growing = seen[:-1]
    assert [len(tokens) for tokens in growing] == list(range(1, NEW_TOKENS + 1))
    assert all(later[: len(earlier)] == earlier for earlier, later in itertools.pairwise(growing))
    assert seen[-1] == growing[-1]  # the end repeats the last token's list


def test_a_seed_repeats_its_sample_logprobs_are_reported_and_a_grammar_holds(qwen3_5) -> None:
    async def sample(seed: int) -> tuple[list[int], int]:
        result = await _tokens(qwen3_5, PROMPTS[1], 12, Sampling(temperature=1.5, seed=seed, top_logprobs=2))
        return result.tokens, len(result.logprobs)

    (first, reported), (again, _), (other, _) = (asyncio.run(sample(s)) for s in (7, 7, 8))
    assert first == again and first != other
    assert reported == len(first)
    pattern = "[0-9]{3}-(red|green|blue)"
    grammar = qwen3_5.grammars.constraint(qwen3_5.grammars.check(GrammarSpec("regex", pattern)))
    result = asyncio.run(_tokens(qwen3_5, PROMPTS[0], 20, Sampling(), grammar))
    assert re.fullmatch(pattern, qwen3_5.tokenizer.decode(result.tokens))
    assert result.tokens[-1] in qwen3_5.eos


def test_rows_that_end_early_leave_the_batch_and_the_others_run_on(qwen3_5, monkeypatch) -> None:
    """One batch: a row whose grammar ends it after a few tokens, a sampled row, a row closed after its
    first token, and greedy rows that run on, equal to ``generate`` alone."""
    engine = qwen3_5._engine
    assert isinstance(engine, PaddedBatches)
    folder = Path(qwen3_5.model.name_or_path)
    want = _reference(folder, PROMPTS[:2], 40)
    pattern = "[0-9]{2}"
    grammar = qwen3_5.grammars.constraint(qwen3_5.grammars.check(GrammarSpec("regex", pattern)))

    async def run() -> None:
        with _batches(engine, monkeypatch) as sizes:
            greedy = [qwen3_5.start(qwen3_5.encode(p), 40, Sampling(), None) for p in PROMPTS[:2]]
            shaped = qwen3_5.start(qwen3_5.encode(PROMPTS[2]), 40, Sampling(), grammar)
            sampled = qwen3_5.start(qwen3_5.encode(PROMPTS[3]), 40, Sampling(temperature=1.5, seed=3), None)
            closed = qwen3_5.start(qwen3_5.encode(PROMPTS[3]), 40, Sampling(), None)
        assert len((await anext(closed)).tokens) == 1
        closed.close()
        ended = await _last(shaped)
        assert re.fullmatch(pattern, qwen3_5.tokenizer.decode(ended.tokens))
        assert ended.tokens[-1] in qwen3_5.eos and len(ended.tokens) <= 3
        assert qwen3_5.running == 3  # the greedy and sampled rows are not read yet
        assert [(await _last(g)).tokens for g in greedy] == want
        drawn = (await _last(sampled)).tokens
        assert len(drawn) == 40 or (len(drawn) < 40 and drawn[-1] in qwen3_5.eos)
        assert sizes == [5]
        assert qwen3_5.running == 0

    asyncio.run(run())


def test_the_key_value_budget_splits_the_waiting_requests_into_batches(tmp_path, monkeypatch) -> None:
    """``kv_budget_tokens`` of the profile bounds a batch's rows x (longest prompt + most new tokens):
    five requests that fit two at a time run as batches of 2, 2 and 1, in arrival order, each equal to
    ``generate`` alone."""
    folder = builders.generative(tmp_path / "m", "Qwen3_5Text")
    prompt = PROMPTS[1]
    generator = CausalLmGenerator.load(
        LoadSpec(
            weights=folder,
            device="cpu",
            precision=ComputePrecision.FLOAT32,
            max_seq_length=1024,
            loadtime={
                "kv_budget_tokens": 2 * (len(AutoTokenizer.from_pretrained(folder).encode(prompt)) + 8)
            },
        )
    )
    try:
        engine = generator._engine
        assert isinstance(engine, PaddedBatches)
        want = _reference(folder, (prompt,), 8)[0]

        async def run() -> list[list[int]]:
            with _batches(engine, monkeypatch) as sizes:
                queued = [generator.start(generator.encode(prompt), 8, Sampling(), None) for _ in range(5)]
            done = [(await _last(g)).tokens for g in queued]
            assert sizes == [2, 2, 1]
            return done

        assert asyncio.run(run()) == [want] * 5
    finally:
        generator.close()


def test_a_batch_waits_briefly_for_as_many_requests_as_the_last_one_ran(qwen3_5, monkeypatch) -> None:
    """Clients whose requests ended together send their next ones a little apart: after a batch of
    three, the next waits (up to the fill window) until three are waiting, so a late one joins it; a
    lone request after that waits the window out and runs alone, and the one after it does not wait."""
    engine = qwen3_5._engine
    assert isinstance(engine, PaddedBatches)
    monkeypatch.setattr(padded, "_FILL_S", 1.0)

    def start(prompt: str) -> Generation:
        return qwen3_5.start(qwen3_5.encode(prompt), 4, Sampling(), None)

    async def run() -> tuple[list[int], float, float]:
        with _batches(engine, monkeypatch) as sizes:
            first = [start(p) for p in PROMPTS[:3]]
        await asyncio.gather(*map(_last, first))
        late = [start(PROMPTS[0])]
        await asyncio.sleep(0.1)
        late += [start(p) for p in PROMPTS[1:3]]
        await asyncio.gather(*map(_last, late))
        waited = []
        for _ in range(2):
            sent = time.monotonic()
            await _last(start(PROMPTS[3]))
            waited.append(time.monotonic() - sent)
        return sizes, *waited

    sizes, window_out, after = asyncio.run(run())
    assert sizes == [3, 3, 1, 1]
    assert window_out >= 1.0
    assert after < 0.9


def test_a_closed_request_stops_and_one_closed_while_queued_never_runs(qwen3_5) -> None:
    engine = qwen3_5._engine
    assert isinstance(engine, PaddedBatches)
    release = threading.Event()
    engine._executor.submit(release.wait)  # the first request runs alone; the second waits behind it

    async def run() -> tuple[int, int]:
        running = qwen3_5.start(qwen3_5.encode(PROMPTS[0]), 900, Sampling(), None)
        release.set()
        await asyncio.to_thread(_until, lambda: not engine._waiting)
        waiting = qwen3_5.start(qwen3_5.encode(PROMPTS[1]), 900, Sampling(), None)
        assert qwen3_5.running == 2
        await anext(running)
        running.close()
        waiting.close()
        after = await _tokens(qwen3_5, PROMPTS[2], 4, Sampling())
        return len(after.tokens), qwen3_5.running

    tokens, left = asyncio.run(run())
    assert (tokens, left) == (4, 0)
    engine._executor.submit(lambda: None).result()  # the thread is past the last request's end
    assert not engine._live  # all left the engine: the running one stopped, the waiting one never ran


def test_close_stops_the_request_running(tmp_path) -> None:
    generator = _load(builders.generative(tmp_path / "m", "Qwen3_5Text"))

    async def run() -> list[int]:
        generation = generator.start(generator.encode(PROMPTS[0]), 900, Sampling(), None)
        first = await anext(generation)
        await asyncio.to_thread(generator.close)  # the registry closes an evicted model off the loop
        last = first
        async for progress in generation:
            last = progress
        return last.tokens

    assert len(asyncio.run(run())) < 900


def _until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def _qwen3_vl_processor(folder: Path) -> Any:
    return load_processor(folder, folder)  # transformers' Qwen3VLProcessor over its PIL image processor


def _glm5_next_processor(folder: Path) -> Any:
    return Glm5NextProcessor(
        image_processor=Glm5NextImageProcessorPil.from_pretrained(folder),
        tokenizer=AutoTokenizer.from_pretrained(folder),
        video_processor=object.__new__(transformers.BaseVideoProcessor),
        chat_template=(folder / "chat_template.jinja").read_text(),
    )


# The vision-language generators: the reference processor, and what an image part renders as.
VISION: dict[str, tuple[Callable[[Path], Any], str]] = {
    "Qwen3VL": (_qwen3_vl_processor, "<|vision_start|><|image_pad|><|vision_end|>"),
    "Glm5Next": (_glm5_next_processor, "<|begin_of_image|><|image|><|end_of_image|>"),
}


@pytest.mark.parametrize("name", list(VISION))
def test_a_vision_language_model_reads_the_images_of_a_chat_as_generate_does(
    name: str, tmp_path: Path, splade_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chat's image parts become the template's placeholders, which the model's processor expands to
    each image's merged patches; the prompt and pixels go to ``generate`` as transformers' own
    processor and ``generate`` take them, and the answer depends on the image."""
    folder = ARCHITECTURES[name][0](tmp_path / name, splade_dir)
    reference_processor, placeholder = VISION[name]
    generator = _load(folder)
    try:
        assert generator.takes_images
        messages = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}
        ]
        text = generator.render_chat(messages, None, {})
        assert placeholder in text
        processor = reference_processor(folder)
        model = AutoModelForImageTextToText.from_pretrained(folder, attn_implementation="sdpa").eval()

        def answer(image: ImageData) -> tuple[list[int], list[int]]:
            ids, pixels = generator.with_images(text, [image])
            ours = asyncio.run(_generated(generator, ids, pixels))
            inputs = processor(text=[text], images=[page(image, "test")], return_tensors="pt")
            assert inputs["input_ids"][0].tolist() == ids  # each placeholder expanded to its patches
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
            return ours, out[0, inputs["input_ids"].shape[1] :].tolist()

        picture = ImageData(random_png(64, 48, 1), "png")
        first, first_want = answer(picture)
        second, second_want = answer(ImageData(random_png(48, 80, 2), "png"))
        assert first == first_want and second == second_want
        assert first != second  # the pixels reached the model

        async def behind_text() -> list[int]:
            """Queued behind two text requests, the request with an image runs in a batch of its own."""
            ids, pixels = generator.with_images(text, [picture])
            assert isinstance(generator._engine, PaddedBatches)
            with _batches(generator._engine, monkeypatch) as sizes:
                texts = [generator.start(generator.encode(p), 4, Sampling(), None) for p in PROMPTS[:2]]
                pictured = generator.start(ids, NEW_TOKENS, Sampling(), None, pixels)
            await asyncio.gather(*map(_last, texts))
            tokens = (await _last(pictured)).tokens
            assert sizes == [2, 1]
            return tokens

        assert asyncio.run(behind_text()) == first_want
    finally:
        generator.close()


async def _generated(
    generator: CausalLmGenerator, ids: list[int], pixels: dict[str, torch.Tensor]
) -> list[int]:
    last = None
    async for progress in generator.start(ids, NEW_TOKENS, Sampling(), None, pixels):
        last = progress
    assert last is not None and last.finished
    return last.tokens


def test_a_model_that_reads_text_only_refuses_images(qwen3_5) -> None:
    assert not qwen3_5.takes_images
    with pytest.raises(UnsupportedInput, match="text only"):
        qwen3_5.with_images("hi", [ImageData(random_png(8, 8, 3), "png")])
