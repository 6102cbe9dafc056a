"""Generative language models (Qwen3, Llama, Gemma, Granite, ... whatever transformers generates
with): the adapter the registry loads, holds, evicts and closes like every model, and ``start`` for the
generation routes.

Each loaded model runs on one of two engines, chosen when it loads: transformers' continuous batching
(``continuous``: a paged KV cache, requests joining the running batch at every step) wherever its paged
cache holds the model, else transformers' own ``generate`` over left-padded batches of the requests
waiting (``padded``): hybrid models with linear-attention layers (Qwen3.5 and later, GLM-5.3's Kimi
delta attention), models whose layers differ in key/value shape (Gemma 4) and vision-language models
transformers runs only whole (Qwen3-VL). Both sample, constrain and stream every request the same way
(``sampling``, ``grammar``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, Self

import torch
from transformers import (
    MODEL_FOR_CAUSAL_LM_MAPPING,
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoTokenizer,
)
from transformers.utils import logging as hf_logging

from sie.adapters.batch import BatchOutputs, ImageData, ModelInput, Prepared
from sie.adapters.contract import NO_TRAITS, TEXT_ONLY, Forward, LoadSpec, Trait
from sie.adapters.generation.continuous import ContinuousBatching, kv_budget_tokens
from sie.adapters.generation.grammar import Constraint, Grammars
from sie.adapters.generation.padded import PaddedBatches
from sie.adapters.generation.progress import Generation
from sie.adapters.generation.sampling import Sampling
from sie.adapters.generation.vision import image_processor
from sie.adapters.runtime.transformer import release_unloaded, weights_and_autocast
from sie.core.options import Capability, Modality
from sie.core.task import UnsupportedInput

log = logging.getLogger(__name__)

_NO_IMAGES: Final = "This model generates from text only; image content parts are not supported"


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
        self.unpaged_because = unpaged_reason(checkpoint)  # None: continuous batching runs it
        self.hf_tokenizer = AutoTokenizer.from_pretrained(str(spec.tokenizer_folder))
        # bfloat16 on a CPU is float32 weights here: neither engine's thread runs autocast.
        dtype, _ = weights_and_autocast(spec.precision, spec.device)
        model = _language_model(spec.weights, checkpoint, dtype)
        model.eval()
        model.to(torch.device(spec.device))
        self.model = model
        config = self.model.generation_config
        eos = config.eos_token_id if config.eos_token_id is not None else self.hf_tokenizer.eos_token_id
        self.eos: tuple[int, ...] = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        pad = config.pad_token_id or (self.eos[0] if self.eos else 0)
        positions = getattr(self.model.config.get_text_config(), "max_position_embeddings", None)
        self.context_length = int(spec.max_seq_length or positions or 4096)
        self.tokenizer = _Vocabulary(self.hf_tokenizer)
        self.grammars = Grammars(self.hf_tokenizer, self.eos)
        # A vision-language model loaded whole reads images in chat, through its own processor.
        self.processor = image_processor(spec, checkpoint) if self.unpaged_because is not None else None
        self._engine: ContinuousBatching | PaddedBatches
        if self.unpaged_because is None:
            self._engine = ContinuousBatching(model, self.eos, pad, spec.loadtime)
        else:
            log.info(
                "%s: padded batches of the waiting requests (transformers' generate): %s",
                spec.weights,
                self.unpaged_because,
            )
            threads = spec.threads if spec.device.startswith("cpu") else None
            self._engine = PaddedBatches(model, self.eos, pad, threads, kv_budget_tokens(spec.loadtime))

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    @property
    def takes_images(self) -> bool:
        return self.processor is not None

    @property
    def running(self) -> int:
        """Generations started and not yet finished or cancelled (the queue depth)."""
        return self._engine.running

    # -- the generation routes' side ------------------------------------------------------------------

    def piece(self, token: int) -> str:
        return str(self.hf_tokenizer.decode([token]))

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.hf_tokenizer.encode(text, add_special_tokens=False)]

    def render_chat(
        self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None, options: dict[str, Any]
    ) -> str:
        """The conversation through the model's own chat template, ending with the assistant's turn
        (a vision-language model's processor holds its template: image parts become its placeholders)."""
        templated = self.processor or self.hf_tokenizer
        if not getattr(templated, "chat_template", None):
            raise UnsupportedInput("This model has no chat template; use /v1/completions with a prompt")
        rendered = templated.apply_chat_template(
            list(messages),
            tools=list(tools or []) or None,
            add_generation_prompt=True,
            tokenize=False,
            **options,
        )
        return str(rendered)

    def with_images(
        self, text: str, images: Sequence[ImageData]
    ) -> tuple[list[int], dict[str, torch.Tensor]]:
        """A rendered chat whose image placeholders the processor expands, one per image in order: the
        prompt's ids and the pixels ``generate`` reads beside them (on a thread: images are decoded
        and resized here)."""
        if self.processor is None:
            raise UnsupportedInput(_NO_IMAGES)
        from sie.adapters.qwen3_vl import page  # imported by ``vision`` with the processor

        pictures = [page(image, "This model") for image in images]
        tensors = self.processor(text=[text], images=pictures, return_tensors="pt")
        ids = [int(i) for i in tensors.pop("input_ids")[0].tolist()]
        tensors.pop("attention_mask", None)
        return ids, dict(tensors)

    def start(
        self,
        prompt: list[int],
        max_new_tokens: int,
        sampling: Sampling,
        constraint: Constraint | None,
        pixels: dict[str, torch.Tensor] | None = None,
    ) -> Generation:
        """Queue a request (on the event loop: its progress arrives there); ``pixels``: what
        ``with_images`` made of its images."""
        if not pixels:
            return self._engine.start(prompt, max_new_tokens, sampling, constraint)
        if not isinstance(self._engine, PaddedBatches):  # only a model on generate has a processor
            raise UnsupportedInput(_NO_IMAGES)
        return self._engine.start(prompt, max_new_tokens, sampling, constraint, pixels)

    # -- the registry's side --------------------------------------------------------------------------

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        raise UnsupportedInput("Generative models answer /v1/generate and the chat routes only")

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        raise UnsupportedInput("Generative models answer /v1/generate and the chat routes only")

    def warm_up(self) -> None:
        """One token, so the engine's first step is not paid by a user."""
        self._engine.warm_up(self.encode("warm up") or [0])

    def close(self) -> None:
        self._engine.close()
        del self._engine, self.model
        release_unloaded()


# The layers the paged cache of transformers' continuous batching holds; a model with others (Qwen3.5's
# linear attention, Mamba's state) runs on ``generate`` instead of failing inside the batch.
_PAGED_LAYERS = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
# The cache's shape per token, which its tensors (one shape, shared by every layer) take from the config.
_CACHE_SHAPE = ("num_key_value_heads", "head_dim")


def unpaged_reason(config: Any) -> str | None:
    """Why continuous batching cannot run this checkpoint (then ``generate`` runs it, in padded
    batches), or None: layers that are not attention, attention whose key/value shape varies by layer, a
    multimodal model with no causal-LM class for its language model."""
    text = config.get_text_config()
    kinds = set(getattr(text, "layer_types", None) or ())
    other = sorted(kinds - _PAGED_LAYERS)
    if other:
        return (
            f"{type(config).__name__} has {', '.join(other)} layers, which transformers' continuous "
            "batching cannot cache"
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
        return (
            f"{type(config).__name__} sets {', '.join(varying)} per layer (key/value heads x head_dim "
            f"{', '.join(f'{h}x{d}' for h, d in shapes)}), and the paged cache of transformers' continuous "
            "batching holds one key/value shape for all layers"
        )
    if text is not config and _causal_class(text) is None and _causal_class(config) is None:
        return f"transformers runs {type(config).__name__} only whole, with no causal-LM class"
    return None


def _causal_class(text: Any) -> Any:
    # the mapping's own annotation (pairs of classes) is not what it holds: one class per config
    causal: Any = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(text), None)
    return causal


def _language_model(weights: Path, config: Any, dtype: torch.dtype) -> Any:
    """The causal LM of a checkpoint, without the vision or audio towers of a multimodal one where
    transformers has a class for its language model alone (else the whole model: Qwen3-VL).

    Only text is generated here, and the paged cache sizes itself from the model's config, which must
    be the language model's (a multimodal config holds its heads and layers in ``text_config``). The
    language model's weights are read under both names a checkpoint holds them by (transformers writes
    ``language_model.model.*``, its modules are ``model.language_model.*``); the towers' are left unread.
    """
    text = config.get_text_config()
    causal = _causal_class(text) if text is not config else None
    if causal is None and (text is config or _causal_class(config) is not None):
        return AutoModelForCausalLM.from_pretrained(str(weights), dtype=dtype, attn_implementation="sdpa")
    if causal is None:
        return AutoModelForImageTextToText.from_pretrained(
            str(weights), dtype=dtype, attn_implementation="sdpa"
        )
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
