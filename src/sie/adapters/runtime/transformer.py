"""A ``transformers`` model on a device, as every torch family runs it.

Loading picks the weights' dtype for the precision (CPU bf16 is mixed: see ``weights_and_autocast``)
and an explicit attention plan; the forward gives the last hidden states of the real tokens in the
packed layout, from the packed BERT forward where the architecture allows it and from the padded
transformers forward otherwise. Families (dense pooling, SPLADE's MLM head, ColBERT's projection,
BGE-M3's three heads, a cross-encoder's classifier) only add their head on top.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Self

import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModel
from transformers.utils import logging as hf_logging

from sie.adapters.batch import ModelInput, Prepared, TokenBatch
from sie.adapters.contract import NO_TRAITS, TEXT_ONLY, Forward, LoadSpec, Trait, texts_only
from sie.adapters.runtime.attention import AttentionPlan, plan_attention
from sie.adapters.runtime.cpu_threads import ThreadsPerBatch, flops_per_token
from sie.adapters.runtime.packed_bert import PackedBert
from sie.adapters.runtime.packing import PackedTokens, host_to_device
from sie.adapters.runtime.pooling import unpad
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.runtime.window import refusals, within_window
from sie.core.heap import collect_unloaded
from sie.core.options import ComputePrecision, Modality

log = logging.getLogger(__name__)

_TORCH_DTYPES = {
    ComputePrecision.FLOAT32: torch.float32,
    ComputePrecision.FLOAT16: torch.float16,
    ComputePrecision.BFLOAT16: torch.bfloat16,
}


def weights_and_autocast(precision: ComputePrecision, device: str) -> tuple[torch.dtype, torch.dtype | None]:
    """bfloat16 on CPU is mixed precision: the linear layers hold bf16 weights and run on AMX under
    autocast, while embeddings, layer norms, softmax and the residual stream stay float32. That keeps
    top-10 retrieval identical to float32, where casting the whole model to bf16 loses a query
    (tests/adapters), and unlike plain autocast over float32 weights it does not re-cast every weight
    on every call (which made one short query slower than float32)."""
    if device.startswith("cpu") and precision is ComputePrecision.BFLOAT16:
        return torch.float32, torch.bfloat16
    return _TORCH_DTYPES[precision], None


def place_for_thresholds(model: Any, spec: LoadSpec) -> None:
    """A library's model (GLiNER, GLiClass, GLiREL) on the spec's device in eval mode, float32 on a
    CPU whatever the precision, as the public server runs them: their outputs are kept by comparing
    scores to a threshold, and bfloat16 moves scores across it. The device goes to the model's own
    ``to`` alone (GLiREL's takes only a device, and records it for its batches)."""
    precision = ComputePrecision.FLOAT32 if spec.device.startswith("cpu") else spec.precision
    model.to(torch.device(spec.device))
    torch.nn.Module.to(model, dtype=_TORCH_DTYPES[precision])
    model.eval()


def release_unloaded() -> None:
    """After an adapter drops its model: the model's cycles collected (``collect_unloaded``) and the
    blocks the CUDA allocator caches returned to the device, so the next load has them."""
    collect_unloaded()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def absolute_positions(encoder: Any) -> int | None:
    """How many tokens ``encoder`` can place when it holds a table of absolute positions (a RoBERTa's
    starts after its padding index); None when its positions are relative or rotary."""
    config = encoder.config
    embeddings = getattr(encoder, "embeddings", None)
    if (
        getattr(embeddings, "position_embeddings", None) is None
        or getattr(config, "position_biased_input", True) is False
    ):
        return None
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return None
    offset = int(config.pad_token_id) + 1 if config.model_type in ("roberta", "xlm-roberta") else 0
    return int(config.max_position_embeddings) - offset


class DeviceModel:
    """What the families holding a transformers model of their own class share (CLIP and SigLIP,
    ColPali, the detectors): the device and dtypes the precision gives, the forward's inference mode
    and autocast, inputs moved with pixels in the weights' dtype, and the close that frees the device."""

    model: Any
    device: torch.device
    _autocast: torch.dtype | None
    _pixel_dtype: torch.dtype
    # Half-precision weights also run under autocast in their dtype: for a model whose forward mixes
    # its half activations with float32 tensors it builds itself, which plain half weights refuse
    # (Grounding DINO's deformable attention samples its features at float32 positions).
    half_under_autocast: ClassVar[bool] = False
    traits: ClassVar[frozenset[Trait]] = NO_TRAITS

    def _place(self, spec: LoadSpec) -> torch.dtype:
        """Sets the device, the autocast and the pixels' dtype; the weights' dtype to load with."""
        self.device = torch.device(spec.device)
        weights_dtype, self._autocast = weights_and_autocast(spec.precision, spec.device)
        if self.half_under_autocast and self._autocast is None and weights_dtype != torch.float32:
            self._autocast = weights_dtype
        self._pixel_dtype = weights_dtype
        return weights_dtype

    def _moved(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {
            key: value.to(self.device, self._pixel_dtype) if key == "pixel_values" else value.to(self.device)
            for key, value in inputs.items()
        }

    @contextmanager
    def _running(self) -> Iterator[None]:
        enabled = self._autocast is not None
        with (
            torch.inference_mode(),
            torch.autocast(self.device.type, dtype=self._autocast or torch.bfloat16, enabled=enabled),
        ):
            yield

    def close(self) -> None:
        del self.model
        release_unloaded()


def linear_weights_to(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """The weight half of CPU mixed bf16 (public so the benchmark's raw baseline runs the same path)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.to(dtype)


def _check_lora_loaded(model: Any, name: str, path: Path) -> None:
    """Every LoRA matrix in the adapter's file has a place in the model: a LoRA saved for another
    architecture would otherwise run as freshly initialised (B = 0), silently the base model."""
    files = list(path.glob("adapter_model*.safetensors"))
    if not files:
        return  # a .bin adapter: transformers checked it while loading
    with safe_open(str(files[0]), framework="pt") as weights:
        expected = sum(1 for key in weights.keys() if ".lora_A." in key or ".lora_B." in key)  # noqa: SIM118
    placed = sum(
        1 for key, _ in model.named_parameters() if f".lora_A.{name}." in key or f".lora_B.{name}." in key
    )
    if placed != expected:
        model.delete_adapter(name)
        raise ValueError(
            f"LoRA at {path} does not fit this model: {placed} of {expected} LoRA weights have a place"
        )


def _from_pretrained(
    auto_class: Any, spec: LoadSpec, dtype: torch.dtype, asked: str | None, planned: str
) -> Any:
    """The model with the YAML's attention implementation, else the plan's; an architecture that has
    no such kernel in transformers (DeBERTa-v2/v3 has no SDPA path) gets its eager attention instead
    of failing the load."""
    if asked is not None:
        return _placed(auto_class, spec, dtype, asked)
    try:
        return _placed(auto_class, spec, dtype, planned)
    except ValueError as exc:
        if planned == "eager" or "attention implementation" not in str(exc):
            raise
        log.info("%s has no %s attention in transformers; using eager", spec.weights, planned)
        return _placed(auto_class, spec, dtype, "eager")


def _placed(auto_class: Any, spec: LoadSpec, dtype: torch.dtype, attention: str) -> Any:
    """The loaded model, refused when the checkpoint left any of its weights (a pooler aside, which
    sentence-transformers checkpoints drop and no family reads) at random initialisation or the wrong
    shape: transformers only warns, and a checkpoint of another layout (Hub code saved under other
    names) would otherwise serve noise."""
    loaded = auto_class.from_pretrained(
        str(spec.weights), dtype=dtype, attn_implementation=attention, output_loading_info=True
    )
    model, info = loaded
    unplaced = sorted(
        str(name)
        for kind in ("missing_keys", "mismatched_keys")
        for name in info.get(kind, ())
        if ".pooler." not in f".{name}"
    )
    if unplaced:
        shown = ", ".join(unplaced[:6]) + (f" and {len(unplaced) - 6} more" if len(unplaced) > 6 else "")
        raise ValueError(
            f"{spec.weights} does not fit {type(model).__name__}: its checkpoint has no weights for {shown}"
        )
    return model


def reads_whole_text(config: Any, loadtime: Mapping[str, Any]) -> bool:
    """Whether a decoder embeds with every token attending to every other (no causal mask): gte-Qwen2
    says so in its config (``is_causal: false``, read by its Hub code), GritLM in the public YAML's
    ``forward_kwargs: {is_causal: false}``. transformers' decoders always mask causally, so run
    alone they would embed a different function than the one trained."""
    forward_kwargs = loadtime.get("forward_kwargs") or {}
    return getattr(config, "is_causal", None) is False or forward_kwargs.get("is_causal") is False


def full_attention_mask(mask: torch.Tensor, dtype: torch.dtype, implementation: str) -> torch.Tensor:
    """The 4D mask of a decoder read bidirectionally: every real token sees every real token. SDPA takes
    it as booleans (True: attend), eager attention as an additive mask. Always materialised: given a
    4D mask the model builds no causal one, and SDPA is never told ``is_causal``."""
    keep = mask.bool()[:, None, None, :].expand(-1, 1, mask.shape[1], -1)
    if implementation == "sdpa":
        return keep
    blocked = torch.zeros(keep.shape, dtype=dtype, device=mask.device)
    return blocked.masked_fill(~keep, torch.finfo(dtype).min)


class Transformer:
    """``model`` is what ``auto_class`` loaded (e.g. a masked-LM or a classifier); ``base`` its encoder."""

    def __init__(
        self,
        model: Any,
        device: torch.device,
        attention: AttentionPlan,
        pad_id: int,
        autocast: torch.dtype | None = None,
        packed: PackedBert | None = None,
        whole_text: bool = False,
        threads: int | None = None,
    ) -> None:
        self.model = model
        self.base = model.base_model
        self.device = device
        self.attention = attention
        self.pad_id = pad_id
        self.packed = packed
        self._autocast = autocast
        self._loras: set[str] = set()
        self._lora: str | None = None  # what the model's PEFT layers run now
        self._takes_types = "token_type_ids" in inspect.signature(self.base.forward).parameters
        self._whole_text = whole_text  # ``reads_whole_text``: the padded forward gets a full mask
        # A CPU model's small batches run on one thread (``cpu_threads``); a GPU's never ask.
        cpu = device.type == "cpu"
        self._threads = ThreadsPerBatch(threads if cpu else None, flops_per_token(self.base) if cpu else 0.0)

    @classmethod
    def load(
        cls, spec: LoadSpec, pad_id: int, auto_class: Any = AutoModel, config: Any = None
    ) -> Transformer:
        """``config`` is the checkpoint's transformers config where ``AutoConfig`` cannot read it (a
        checkpoint saved by Hub code, loaded by an ``auto_class`` that converts it)."""
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # a server log is no terminal
        if spec.threads and spec.device.startswith("cpu"):
            torch.set_num_threads(spec.threads)
        device = torch.device(spec.device)
        weights_dtype, autocast = weights_and_autocast(spec.precision, spec.device)
        config = config or AutoConfig.from_pretrained(str(spec.weights))
        packable = spec.loadtime.get("packed", True) and PackedBert.supports_config(config)
        whole_text = reads_whole_text(config, spec.loadtime)
        attention = plan_attention(
            spec.attention,
            device,
            autocast or weights_dtype,
            PackedBert.head_dim(config) if packable else None,
        )
        model = _from_pretrained(
            auto_class,
            spec,
            weights_dtype,
            spec.loadtime.get("attn_implementation"),
            # flash-attn kernels take no mask of ours: a decoder read whole runs SDPA
            "sdpa"
            if whole_text and attention.transformers_impl == "flash_attention_2"
            else attention.transformers_impl,
        )
        model.eval().to(device)
        if autocast is not None:
            linear_weights_to(model, autocast)
        base = model.base_model
        packed = PackedBert(base, attention) if packable and PackedBert.supports(base) else None
        log.info(
            "attention for %s: %s%s, SDPA backends %s",
            spec.weights,
            attention.packed.value if packed else "padded",
            "" if packed else f" ({model.config._attn_implementation})",
            ", ".join(b.name for b in attention.sdpa),
        )
        if whole_text and model.config._attn_implementation not in ("sdpa", "eager"):
            raise ValueError(
                f"{spec.weights} embeds with full attention, which needs SDPA or eager attention, "
                f"not {model.config._attn_implementation}"
            )
        threads = spec.threads if spec.device.startswith("cpu") else None
        return cls(model, device, attention, pad_id, autocast, packed, whole_text, threads)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    def add_lora(self, name: str, path: Path) -> None:
        """Inject the PEFT adapter in ``path`` under ``name`` (transformers' PEFT integration wraps the
        targeted layers); the packed forward gets merged weights of its own (``PackedBert.add_lora``)."""
        if not (path / "adapter_config.json").is_file():
            raise ValueError(f"{path} holds no PEFT adapter (adapter_config.json is missing)")
        # transformers' load report lists every *other* adapter's weights as missing: quiet it, and
        # check this adapter's weights all arrived instead.
        report = logging.getLogger("transformers.integrations.peft")
        level = report.level
        report.setLevel(logging.ERROR)
        try:
            with warnings.catch_warnings():  # several adapters on one model is the point here
                warnings.filterwarnings("ignore", message="Already found a `peft_config`")
                self.model.load_adapter(str(path), adapter_name=name)
        finally:
            report.setLevel(level)
        self._loras.add(name)
        _check_lora_loaded(self.model, name, path)
        self.model.enable_adapters()  # loading leaves the state unclear: make it explicit
        self.model.set_adapter(name)
        self._lora = name
        if self.packed is not None:
            self.packed.add_lora(name)

    def remove_lora(self, name: str) -> None:
        if name not in self._loras:
            return
        if self.packed is not None:
            self.packed.remove_lora(name)
        self._select(None)
        with warnings.catch_warnings():  # PEFT names another active adapter; ``_select`` decides that
            warnings.filterwarnings("ignore", message="Adapter .* was active which is now deleted")
            self.model.delete_adapter(name)
        self._loras.discard(name)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _select(self, lora: str | None) -> None:
        """Point the PEFT layers at ``lora`` (None: bypass them); free while no LoRA was ever loaded."""
        if lora == self._lora or not self._loras:
            return
        if lora is None:
            self.model.disable_adapters()
        else:
            if lora not in self._loras:
                raise ValueError(f"LoRA {lora!r} is not loaded")
            if self._lora is None:
                self.model.enable_adapters()
            self.model.set_adapter(lora)
        self._lora = lora

    @contextmanager
    def running(self, lora: str | None = None) -> Iterator[None]:
        """Inference mode, the precision's autocast, the attention plan's SDPA backends and the LoRA
        (None: the base model) every module and the packed forward run with."""
        self._select(lora)
        with (
            torch.inference_mode(),
            torch.autocast(
                self.device.type, dtype=self._autocast or torch.bfloat16, enabled=self._autocast is not None
            ),
            self.attention.sdpa_backends(),
        ):
            yield

    def token_states(self, batch: Sequence[Prepared]) -> tuple[torch.Tensor, PackedTokens]:
        """Last hidden states of every real token, ``[tokens, hidden]`` in batch order (call inside
        ``running``)."""
        tokens = PackedTokens.of(batch, self.device, self.packed.first_position if self.packed else 0)
        with self._threads.sized(int(tokens.ids.numel())):
            if self.packed is not None:
                return self.packed.hidden_states(tokens, self._lora), tokens
            padded = self.pad(batch)
            mask = padded["attention_mask"]
            if self._whole_text:
                dtype = self._autocast or next(self.base.parameters()).dtype
                padded["attention_mask"] = full_attention_mask(
                    mask, dtype, self.base.config._attn_implementation
                )
            hidden = self.base(**padded).last_hidden_state
            return unpad(hidden, mask), tokens

    def pad(self, batch: Sequence[Prepared]) -> dict[str, torch.Tensor]:
        """The padded inputs of a transformers forward, on the device."""
        padded = TokenBatch.pad(batch, self.pad_id)
        inputs = {
            "input_ids": host_to_device(padded.input_ids, self.device),
            "attention_mask": host_to_device(padded.attention_mask, self.device),
        }
        if self._takes_types:
            inputs["token_type_ids"] = host_to_device(padded.token_type_ids, self.device)
        return inputs

    def close(self) -> None:
        del self.model, self.base, self.packed
        release_unloaded()


class TransformerAdapter:
    """What every torch family shares: its tokenizer, a ``Transformer`` backbone, single-text
    preparation, loading and closing. A family sets ``family`` (named in input errors) and, when it
    needs a head of transformers' own, ``auto_class``; then it adds its ``run``."""

    family: ClassVar[str]
    request_options: ClassVar[frozenset[str]] = frozenset()
    traits: ClassVar[frozenset[Trait]] = NO_TRAITS
    auto_class: ClassVar[Any] = AutoModel
    inputs: ClassVar[frozenset[Modality]] = TEXT_ONLY

    def __init__(self, spec: LoadSpec) -> None:
        self.tokenizer = TextTokenizer.of(spec)
        self.backbone = Transformer.load(
            spec, self.tokenizer.pad_id, self.auto_class, self.checkpoint_config(spec)
        )
        self.packs_tokens = self.backbone.packed is not None

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)

    @classmethod
    def checkpoint_config(cls, spec: LoadSpec) -> Any:
        """The config for ``Transformer.load``; None: ``AutoConfig`` reads the checkpoint's own."""
        return None

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        texts = texts_only(inputs, self.family)
        prepared = [Prepared(ids) for ids in self.tokenizer.encode(texts)]
        return within_window(prepared, refusals(self.tokenizer, texts, forward))

    def load_lora(self, name: str, path: Path) -> None:
        self.backbone.add_lora(name, path)

    def unload_lora(self, name: str) -> None:
        self.backbone.remove_lora(name)

    def close(self) -> None:
        self.backbone.close()
