"""Generative models on continuous batching, held to transformers' own ``generate``.

Every architecture the catalogue's generative ids use and transformers runs (small random models built
from each config, tests/builders.py): greedy output equal to ``generate`` token for token, a request
alone equal to the same request inside a busy batch (a multimodal checkpoint, Gemma 3's, run as its
language model alone); then the per-request sampler (seeds, logit bias, logprobs), the grammars (regex,
JSON Schema) and cancellation; and what the paged cache cannot hold (linear attention, Gemma 4's
per-layer key/value shapes), left to ``generate`` (``test_generation_padded``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from pathlib import Path

import jsonschema
import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    ContinuousBatchingConfig,
    Qwen3_5TextConfig,
)
from transformers.generation.continuous_batching.cache import PagedAttentionCache
from transformers.generation.continuous_batching.distributed import DistributedHelper
from transformers.integrations.heterogeneity.configuration_utils import AmbiguousGlobalPerLayerAttributeError

from sie.adapters.contract import LoadSpec
from sie.adapters.generation.causal_lm import CausalLmGenerator, unpaged_reason
from sie.adapters.generation.grammar import GrammarError, GrammarSpec
from sie.adapters.generation.sampling import Sampling
from sie.adapters.generation.text import TextStream
from sie.core.options import ComputePrecision
from tests import builders

PROMPTS = (
    "Vector search finds",
    "The quick brown fox",
    "Bonjour, ça va?",
    "A reranker scores pairs of query and document " * 3,
)
NEW_TOKENS = 24


def _load(folder: Path) -> CausalLmGenerator:
    spec = LoadSpec(weights=folder, device="cpu", precision=ComputePrecision.FLOAT32, max_seq_length=1024)
    return CausalLmGenerator.load(spec)


def _reference(
    folder: Path,
    prompts: tuple[str, ...],
    new_tokens: int,
    auto: type = AutoModelForCausalLM,
    device: str = "cpu",
) -> list[list[int]]:
    """transformers' greedy ``generate`` of each prompt alone, the model loaded by ``auto`` on
    ``device``."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = auto.from_pretrained(folder, attn_implementation="sdpa").eval().to(device)  # type: ignore[attr-defined]
    outputs = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(device)
        with torch.no_grad():
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False
            )
        outputs.append(out[0, ids.shape[1] :].tolist())
    return outputs


async def _tokens(
    generator: CausalLmGenerator, prompt: str, new_tokens: int, sampling: Sampling, constraint=None
):
    """The last ``Progress``, with the logprobs of every step gathered into it."""
    last, logprobs = None, []
    async for progress in generator.start(generator.encode(prompt), new_tokens, sampling, constraint):
        last = progress
        logprobs += progress.logprobs
    assert last is not None and last.finished
    return dataclasses.replace(last, logprobs=logprobs)


@pytest.fixture(scope="module", params=builders.GENERATIVE_ARCHITECTURES)
def architecture(request, tmp_path_factory) -> tuple[Path, CausalLmGenerator]:
    folder = builders.generative(tmp_path_factory.mktemp("generative") / request.param, request.param)
    generator = _load(folder)
    yield folder, generator
    generator.close()


def test_greedy_equals_generate_alone_and_in_a_busy_batch(architecture) -> None:
    folder, generator = architecture
    want = _reference(folder, PROMPTS, NEW_TOKENS)

    async def run() -> tuple[list[int], list[list[int]]]:
        alone = await _tokens(generator, PROMPTS[0], NEW_TOKENS, Sampling())
        busy = await asyncio.gather(*(_tokens(generator, p, NEW_TOKENS, Sampling()) for p in PROMPTS * 2))
        return alone.tokens, [b.tokens for b in busy]

    alone, busy = asyncio.run(run())
    assert alone == want[0]
    assert busy == want * 2


@pytest.fixture(scope="module")
def qwen3_folder(tmp_path_factory) -> Path:
    return builders.generative(tmp_path_factory.mktemp("qwen3") / "qwen3", "Qwen3")


@pytest.fixture(scope="module")
def qwen3(qwen3_folder) -> CausalLmGenerator:
    generator = _load(qwen3_folder)
    yield generator
    generator.close()


def test_a_seed_repeats_its_sample_and_another_seed_differs(qwen3) -> None:
    async def run(seed: int) -> list[int]:
        return (await _tokens(qwen3, PROMPTS[1], 16, Sampling(temperature=1.5, seed=seed))).tokens

    first, again, other = asyncio.run(run(7)), asyncio.run(run(7)), asyncio.run(run(8))
    assert first == again
    assert first != other


def test_logit_bias_and_penalties_steer_the_choice(qwen3) -> None:
    token = qwen3.encode("fox")[0]
    biased = asyncio.run(_tokens(qwen3, PROMPTS[0], 6, Sampling(logit_bias={token: 100.0})))
    assert biased.tokens == [token] * 6
    # A greedy request repeats tokens here; a strong presence penalty never takes one twice.
    plain = asyncio.run(_tokens(qwen3, PROMPTS[3], NEW_TOKENS, Sampling()))
    assert len(set(plain.tokens)) < len(plain.tokens)
    penalised = asyncio.run(
        _tokens(qwen3, PROMPTS[3], NEW_TOKENS, Sampling(presence_penalty=2.0, logit_bias={}))
    )
    assert penalised.tokens != plain.tokens


def test_logprobs_are_the_models_own_distribution(qwen3, qwen3_folder) -> None:
    result = asyncio.run(_tokens(qwen3, PROMPTS[0], 5, Sampling(top_logprobs=3)))
    reference = AutoModelForCausalLM.from_pretrained(qwen3_folder, attn_implementation="sdpa").eval()
    ids = torch.tensor([qwen3.encode(PROMPTS[0])])
    with torch.no_grad():
        logits = reference(ids).logits[0, -1].float()
    expected = torch.log_softmax(logits, dim=-1)
    first = result.logprobs[0]
    assert first.token == result.tokens[0] == int(torch.argmax(logits))
    assert first.logprob == pytest.approx(float(expected[first.token]), abs=1e-4)
    assert [t for t, _ in first.top] == torch.topk(expected, 3).indices.tolist()
    assert len(result.logprobs) == 5


def test_a_regex_grammar_holds_the_output(qwen3) -> None:
    pattern = "[0-9]{3}-(red|green|blue)"
    grammar = qwen3.grammars.check(GrammarSpec("regex", pattern))
    result = asyncio.run(_tokens(qwen3, PROMPTS[0], 20, Sampling(), qwen3.grammars.constraint(grammar)))
    text = qwen3.tokenizer.decode(result.tokens)
    assert re.fullmatch(pattern, text), text
    assert result.tokens[-1] in qwen3.eos  # it ended because the grammar was done, not at the cap


def test_a_json_schema_grammar_gives_valid_json(qwen3) -> None:
    schema = {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 99},
        },
        "required": ["color", "n"],
        "additionalProperties": False,
    }
    grammar = qwen3.grammars.check(GrammarSpec.json_schema(schema))

    async def run():
        return await asyncio.gather(
            *(
                _tokens(qwen3, p, 40, Sampling(temperature=1.0, seed=i), qwen3.grammars.constraint(grammar))
                for i, p in enumerate(PROMPTS)
            )
        )

    outputs = asyncio.run(run())
    for result in outputs:
        jsonschema.validate(json.loads(qwen3.tokenizer.decode(result.tokens)), schema)


def test_a_bad_grammar_is_refused_before_generating(qwen3) -> None:
    with pytest.raises(GrammarError):
        qwen3.grammars.check(GrammarSpec("regex", "[unclosed"))
    with pytest.raises(GrammarError):
        qwen3.grammars.check(GrammarSpec("ebnf", "root ::= undefined_rule"))


def test_a_cancelled_request_leaves_the_batch(qwen3) -> None:
    async def run() -> list[int]:
        generation = qwen3.start(qwen3.encode(PROMPTS[0]), 500, Sampling(), None)
        async for _ in generation:
            break
        generation.close()
        # The next request still runs, and nothing of the cancelled one is kept.
        after = await _tokens(qwen3, PROMPTS[1], 4, Sampling())
        return after.tokens

    assert len(asyncio.run(run())) == 4
    assert not qwen3._engine._samplers._slots
    assert not qwen3._engine._manager.output_router.result_handlers


def test_what_the_paged_cache_cannot_hold_runs_on_generate(tmp_path) -> None:
    """Linear-attention layers, and Gemma 4's global layers with a wider head than its sliding ones
    (and, in 26B-A4B and 31B, fewer key/value heads): the model loads on ``generate`` instead, which
    the load says."""
    config = Qwen3_5TextConfig(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])
    assert "linear_attention" in (unpaged_reason(config) or "")
    gemma4 = AutoConfig.from_pretrained(builders.gemma4(tmp_path / "gemma4"))
    assert re.search(
        r"sets head_dim per layer .*1x16, 1x32.* one key/value shape", unpaged_reason(gemma4) or ""
    )


def test_the_paged_cache_holds_one_key_value_shape_for_every_layer(tmp_path) -> None:
    """Why Gemma 4 runs on ``generate``, pinned to transformers: its paged cache reads a single
    ``head_dim`` from the config, which a per-layer one refuses to give; read anyway, it is the sliding
    layers' (16), narrower than the global layers' keys (32). An upgrade that lifts this fails here:
    batch Gemma 4 continuously."""
    text = AutoConfig.from_pretrained(builders.gemma4(tmp_path / "gemma4")).get_text_config()
    batching = ContinuousBatchingConfig(block_size=32, num_blocks=4, max_batch_tokens=64)

    def cache() -> PagedAttentionCache:
        return PagedAttentionCache(text, batching, "cpu", DistributedHelper(None, None), {}, torch.float32)

    with pytest.raises(AmbiguousGlobalPerLayerAttributeError, match="head_dim"):
        cache()
    text.allow_global_per_layer_attribute_access = True
    assert cache().key_cache[0].shape[-1] == 16
    assert {text.per_layer_config[i].head_dim for i in range(text.num_hidden_layers)} == {16, 32}


def test_text_stream_holds_back_partial_characters_and_stop_sequences() -> None:
    pieces = {1: "Hel", 2: "lo ", 3: "wor", 4: "ld", 5: "\ufffd"}

    def decode(ids: list[int]) -> str:
        return "".join(pieces[i] for i in ids)

    stream = TextStream(decode, stop=("wo", "zz"))
    assert stream.push([1]) == "Hel"
    assert stream.push([1, 2]) == "lo "
    assert stream.push([1, 2, 3]) == ""  # "wor" holds the stop sequence "wo"
    assert stream.stopped and stream.text == "Hello "
    plain = TextStream(decode)
    assert plain.push([1, 5]) == "Hel"  # a partial character waits for its next token
    assert plain.push([1, 5], final=True) == "\ufffd"
    held = TextStream(decode, stop=("lo!",))
    assert held.push([1]) == "He"  # the "l" may begin "lo!"
    assert held.push([1, 2]) == "llo "


def test_repetition_penalty_equals_transformers(qwen3, qwen3_folder) -> None:
    tokenizer = AutoTokenizer.from_pretrained(qwen3_folder)
    reference = AutoModelForCausalLM.from_pretrained(qwen3_folder, attn_implementation="sdpa").eval()
    ids = tokenizer(PROMPTS[3], return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        out = reference.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, repetition_penalty=1.5)
    ours = asyncio.run(_tokens(qwen3, PROMPTS[3], NEW_TOKENS, Sampling(repetition_penalty=1.5)))
    assert ours.tokens == out[0, ids.shape[1] :].tolist()


def test_a_tokenizer_llguidance_cannot_read_loads_without_grammars(tmp_path, splade_dir) -> None:
    """A WordPiece tokenizer (the packaged BERT's): the model generates; a grammar is refused."""
    from transformers import BertTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tokenizer = BertTokenizerFast.from_pretrained(splade_dir)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=64,
        eos_token_id=tokenizer.sep_token_id,
    )
    Qwen3ForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    generator = _load(tmp_path)
    try:
        assert (
            len(
                asyncio.run(
                    _tokens(generator, "hello world", 3, Sampling(logit_bias={config.eos_token_id: -100.0}))
                ).tokens
            )
            == 3
        )
        with pytest.raises(GrammarError, match="not available for this model's tokenizer"):
            generator.grammars.check(GrammarSpec("regex", "[a-z]+"))
    finally:
        generator.close()


def test_glm_5_3_flash_has_linear_attention_layers_and_no_causal_lm_class_in_transformers() -> None:
    """Why zai-org/GLM-5.3-Flash runs on ``generate``, pinned to transformers' ``glm5_next``
    (whose docstrings name that checkpoint): its default layer schedule mixes Kimi-delta linear-attention
    layers, whose recurrent state the paged cache does not hold, with sparse-attention ones, and it
    runs only as an image-text-to-text model. An upgrade that changes either fails here."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextTextConfig

    assert "glm5_next" not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    assert "glm5_next_text" not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    assert MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES["glm5_next"] == "Glm5NextForConditionalGeneration"
    assert "linear_attention" in Glm5NextTextConfig().layer_types


def test_qwen3_vl_has_no_causal_lm_class_in_transformers() -> None:
    """Why Qwen3-VL-8B-Instruct runs on ``generate``, pinned to transformers: continuous batching runs
    a causal LM, and Qwen3-VL is only an image-text-to-text model there. An upgrade that adds one
    fails here: batch it continuously."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    assert "qwen3_vl" not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    assert "qwen3_vl_text" not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    assert MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES["qwen3_vl"] == "Qwen3VLForConditionalGeneration"
