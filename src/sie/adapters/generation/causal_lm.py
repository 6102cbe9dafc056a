"""Generative causal language models (Qwen3, Llama, Gemma, Granite, ... whatever transformers runs as
``AutoModelForCausalLM``) on transformers' continuous batching.

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
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, Self

import torch
from transformers import (
    MODEL_FOR_CAUSAL_LM_MAPPING,
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    ContinuousBatchingConfig,
    GenerationConfig,
)
from transformers.generation.continuous_batching.requests import GenerationOutput, RequestStatus
from transformers.utils import logging as hf_logging

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import NO_TRAITS, TEXT_ONLY, Forward, LoadSpec, Trait
from sie.adapters.generation.grammar import Constraint, Grammars
from sie.adapters.generation.row_samplers import RowSamplers
from sie.adapters.generation.sampling import RowSampler, Sampling, TokenLogprob
from sie.adapters.runtime.transformer import release_unloaded, weights_and_autocast
from sie.core.options import Capability, Modality
from sie.core.task import UnsupportedInput

log = logging.getLogger(__name__)

_BLOCK_TOKENS = 32  # the paged cache's block: small, so short requests waste little of the budget
_DEFAULT_KV_TOKENS = 8192


@dataclass(frozen=True)
class Progress:
    """What a request has produced so far: every generated token (the end-of-sequence token included
    when it came), the logprobs of those not reported before, and whether it is over."""

    tokens: list[int]
    logprobs: list[TokenLogprob]
    finished: bool
    error: str | None = None


class Generation:
    """One request in the manager, read as an async iterator of ``Progress``; ``close`` cancels it
    (a client that went away) and frees its slot."""

    def __init__(self, owner: CausalLmGenerator, request_id: str, slot: int, sampler: RowSampler) -> None:
        self.request_id = request_id
        self.constraint = sampler.constraint
        self._owner, self._slot, self._sampler = owner, slot, sampler
        self._queue: asyncio.Queue[GenerationOutput] = asyncio.Queue()
        self._reported = 0
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
        # The sampler may be tokens ahead of this output (outputs wait for the loop): only this output's.
        logprobs = self._sampler.logprobs[self._reported : len(output.generated_tokens)]
        self._reported += len(logprobs)
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


class CausalLmGenerator:
    """The adapter of a generative model: the contract's members for the registry (it loads, is held,
    evicted and closed like every model), and ``start`` for the generation routes."""

    family: ClassVar[str] = "CausalLmGenerator"
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    inputs: ClassVar[frozenset[Modality]] = TEXT_ONLY
    request_options: ClassVar[frozenset[str]] = frozenset()
    traits: ClassVar[frozenset[Trait]] = NO_TRAITS
    packs_tokens = False

    def __init__(self, spec: LoadSpec) -> None:
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        checkpoint = AutoConfig.from_pretrained(str(spec.weights))
        _check_layers(checkpoint)
        self.hf_tokenizer = AutoTokenizer.from_pretrained(str(spec.tokenizer_folder))
        # bfloat16 on a CPU is float32 weights here: the manager's thread runs no autocast.
        dtype, _ = weights_and_autocast(spec.precision, spec.device)
        model = _language_model(spec.weights, checkpoint, dtype)
        model.eval()
        model.to(torch.device(spec.device))
        self.model = model
        config = self.model.generation_config
        eos = config.eos_token_id if config.eos_token_id is not None else self.hf_tokenizer.eos_token_id
        self.eos: tuple[int, ...] = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        positions = getattr(self.model.config, "max_position_embeddings", None)
        self.context_length = int(spec.max_seq_length or positions or 4096)
        self.tokenizer = _Vocabulary(self.hf_tokenizer)
        self.grammars = Grammars(self.hf_tokenizer, self.eos)
        self._samplers = RowSamplers()
        self._ids = itertools.count()
        self.running = 0  # generations started and not yet finished or cancelled (the queue depth)
        self._manager = self._start_manager(spec)

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    def _start_manager(self, spec: LoadSpec) -> Any:
        kv_tokens = int(spec.loadtime.get("kv_budget_tokens") or _DEFAULT_KV_TOKENS)
        max_batch_tokens = int(spec.loadtime.get("max_batch_tokens") or min(kv_tokens, 2048))
        generation = GenerationConfig(  # type: ignore[no-untyped-call]
            do_sample=False,
            eos_token_id=list(self.eos) or None,
            pad_token_id=self.model.generation_config.pad_token_id or (self.eos[0] if self.eos else 0),
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
        manager = self.model.init_continuous_batching(
            generation_config=generation, continuous_batching_config=batching
        )
        # Our sampler joins the manager's processors before its first batch sizes their arguments.
        processors = manager.logit_processor
        processors.logits_processor.append(self._samplers)
        processors.tensors_required += 1
        processors.supported_keys.update(self._samplers.supported_kwargs)
        processors.do_processing = True
        manager.start()
        return manager

    # -- the generation routes' side ------------------------------------------------------------------

    def piece(self, token: int) -> str:
        return str(self.hf_tokenizer.decode([token]))

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.hf_tokenizer.encode(text, add_special_tokens=False)]

    def render_chat(
        self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None, options: dict[str, Any]
    ) -> str:
        """The conversation through the model's own chat template, ending with the assistant's turn."""
        if not getattr(self.hf_tokenizer, "chat_template", None):
            raise UnsupportedInput("This model has no chat template; use /v1/completions with a prompt")
        rendered = self.hf_tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools or []) or None,
            add_generation_prompt=True,
            tokenize=False,
            **options,
        )
        return str(rendered)

    def start(
        self, prompt: list[int], max_new_tokens: int, sampling: Sampling, constraint: Constraint | None
    ) -> Generation:
        """Queue a request (on the event loop: its results arrive there)."""
        if not self._manager.is_running():  # its thread died of an error it logged: nothing would answer
            raise RuntimeError(f"the generation loop of this model has stopped: {self._manager.fatal_error}")
        sampler = RowSampler(sampling, constraint, self.eos, prompt)
        slot = self._samplers.add(sampler)
        request_id = f"sie-{next(self._ids)}"
        generation = Generation(self, request_id, slot, sampler)
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

    # -- the registry's side --------------------------------------------------------------------------

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        raise UnsupportedInput("Generative models answer /v1/generate and the chat routes only")

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        raise UnsupportedInput("Generative models answer /v1/generate and the chat routes only")

    def warm_up(self) -> None:
        """One token through the manager, so its cache and first batch are not paid by a user."""
        request_id = self._manager.add_request(self.encode("warm up") or [0], max_new_tokens=1)
        self._manager.get_result(request_id, timeout=120)

    def close(self) -> None:
        self._manager.stop(block=True, timeout=30)
        self._manager.destroy()
        del self._manager, self.model
        release_unloaded()


# The layers the paged cache of transformers' continuous batching holds; a model with others (Qwen3.5's
# linear attention, Mamba's state) is refused at load instead of failing inside the batch.
_PAGED_LAYERS = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
# The cache's shape per token, which its tensors (one shape, shared by every layer) take from the config.
_CACHE_SHAPE = ("num_key_value_heads", "head_dim")


def _check_layers(config: Any) -> None:
    """Refuse at load what the paged cache cannot hold, instead of the manager's thread dying on the
    first batch: layers that are not attention, and attention whose key/value shape varies by layer."""
    text = config.get_text_config()
    kinds = set(getattr(text, "layer_types", None) or ())
    other = sorted(kinds - _PAGED_LAYERS)
    if other:
        raise ValueError(
            f"{type(config).__name__} has {', '.join(other)} layers, which transformers' continuous "
            "batching cannot cache; this server runs only attention-only generative models"
        )
    # Gemma 4's global layers have their own head_dim (global_head_dim) and, with attention_k_eq_v,
    # their own number of key/value heads: the paged cache allocates one [heads, head_dim] for all.
    varying = sorted(set(_CACHE_SHAPE) & set(getattr(text, "per_layer_attributes", None) or ()))
    if varying and getattr(text, "is_heterogeneous", False):
        shapes = sorted(
            {
                tuple(getattr(text.per_layer_config[i], name) for name in _CACHE_SHAPE)
                for i in range(text.num_hidden_layers)
            }
        )
        raise ValueError(
            f"{type(config).__name__} sets {', '.join(varying)} per layer (key/value heads x head_dim "
            f"{', '.join(f'{h}x{d}' for h, d in shapes)}), and the paged cache of transformers' continuous "
            "batching holds one key/value shape for all layers"
        )


def _language_model(weights: Path, config: Any, dtype: torch.dtype) -> Any:
    """The causal LM of a checkpoint, without the vision or audio towers of a multimodal one.

    Only text is generated here, and the paged cache sizes itself from the model's config, which must
    be the language model's (a multimodal config holds its heads and layers in ``text_config``). The
    language model's weights are read under both names a checkpoint holds them by (transformers writes
    ``language_model.model.*``, its modules are ``model.language_model.*``); the towers' are left unread.
    """
    text = config.get_text_config()
    # the mapping's own annotation (pairs of classes) is not what it holds: one class per config
    causal: Any = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(text), None) if text is not config else None
    if causal is None:  # a text model, or a multimodal one with no text-only class: the whole model
        return AutoModelForCausalLM.from_pretrained(str(weights), dtype=dtype, attn_implementation="sdpa")
    return causal.from_pretrained(
        str(weights),
        config=text,
        dtype=dtype,
        attn_implementation="sdpa",
        key_mapping=_LANGUAGE_MODEL_KEYS,
    )


_LANGUAGE_MODEL_KEYS: Final = {
    r"^model\.language_model\.": "model.",
    r"^language_model\.model\.": "model.",
    r"^language_model\.lm_head\.": "lm_head.",
}


class _Vocabulary:
    """The engine's view of the tokenizer (``contract.Vocabulary``)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    @property
    def vocab_size(self) -> int:
        return len(self._tokenizer)

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))
