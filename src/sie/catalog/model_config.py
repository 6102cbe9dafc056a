"""Model YAML files in the public schema (``sie_id``, ``hf_id``/``weights_path``, ``tasks``, ``profiles``).

Parsing is strict (unknown keys are errors) so a typo stops startup with the file, the field and the
reason instead of silently serving a different model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sie.core.options import Capability, ComputePrecision


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Inputs(_Strict):
    text: bool = True
    image: bool = False
    audio: bool = False
    video: bool = False
    document: bool = False

    def names(self) -> list[str]:
        return [name for name in ("text", "image", "audio", "video", "document") if getattr(self, name)]


class OutputDim(_Strict):
    dim: int = Field(gt=0)


class EncodeTask(_Strict):
    dense: OutputDim | None = None
    sparse: OutputDim | None = None
    multivector: OutputDim | None = None

    def dims(self) -> dict[str, int]:
        return {name: out.dim for name in ("dense", "sparse", "multivector") if (out := getattr(self, name))}


class GenerateCapabilities(_Strict):
    grammar: list[Literal["json_schema", "regex", "ebnf"]] = Field(default_factory=list)
    streaming: bool = True
    tools: bool = False
    code: bool = False
    sql: bool = False
    guard: bool = False


class GenerateTask(_Strict):
    """Text generation, as the public schema declares it (``sie.adapters.generation``): the window,
    the output cap, what the model's outputs may be held to, and its chat template's arguments."""

    context_length: int
    max_output_tokens: int
    capabilities: GenerateCapabilities = Field(default_factory=GenerateCapabilities)
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    prewarm_grammars: list[dict[str, Any]] = Field(default_factory=list)
    grammar_profile: str | None = None


class Tasks(_Strict):
    encode: EncodeTask | None = None
    score: dict[str, Any] | None = None
    extract: dict[str, Any] | None = None
    generate: GenerateTask | None = None


# A generative profile's deadlines (``adapter_options.runtime``, the public fields), in seconds.
GENERATION_DEADLINES: Final = ("first_chunk_timeout_s", "inter_chunk_timeout_s", "overall_timeout_s")


class AdapterOptions(_Strict):
    loadtime: dict[str, Any] = Field(default_factory=dict)
    runtime: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> AdapterOptions:
        """A deadline that is not a positive number would hold no generation: refused here, where
        the YAML is read, rather than ignored when a request runs."""
        for key in GENERATION_DEADLINES:
            value = self.runtime.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(
                    f"adapter_options.runtime.{key} must be a positive number of seconds, got {value!r}"
                )
        return self


class AdaptiveBatching(_Strict):
    """The public server's latency-target batching; our batcher fills batches by tokens and waits
    for nothing (docs/architecture.md), so these are accepted and not used."""

    enabled: bool | None = None
    target_p50_ms: float | None = None
    calibration_multiplier: float | None = None
    min_target_p50_ms: float | None = None
    max_target_p50_ms: float | None = None
    min_wait_ms: float | None = None
    max_wait_ms: float | None = None
    gain: float | None = None
    integral_gain: float | None = None


class Profile(_Strict):
    extends: str | None = None
    max_batch_tokens: int | None = Field(default=None, gt=0)
    compute_precision: ComputePrecision | None = None
    adapter_path: str | None = None
    adapter_options: AdapterOptions = Field(default_factory=AdapterOptions)
    adaptive_batching: AdaptiveBatching | None = None
    # The generative families' profile fields (KV budget, output cap, chat template, grammar).
    kv_budget_tokens: int | None = None
    admission_enabled: bool | None = None
    max_output_tokens: int | None = Field(default=None, gt=0)
    chat_template_kwargs: dict[str, Any] | None = None
    grammar_profile: str | None = None


_THRESHOLD_FIELDS: Final = ("wake_above", "sleep_below", "window_s", "cooldown_s")


# A remote profile: its adapter path names the public server's remote adapters, and its load-time
# options name an upstream of the operator's upstreams file and the model id it serves there.
REMOTE_ADAPTER_PREFIX: Final = "sie_server.adapters.remote."
REMOTE_LOADTIME_KEYS: Final = frozenset({"upstream", "upstream_model"})
REMOTE_OPTIONAL_LOADTIME_KEYS: Final = frozenset({"max_seq_length"})
# The public server's spellings: a DNS label for an upstream's name; for the model id, path segments
# that start with a letter or digit (no '.' or '..': the id is sent to the upstream), an optional tag.
UPSTREAM_NAME: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
UPSTREAM_MODEL: Final = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,127}){0,3}(?::[A-Za-z0-9][A-Za-z0-9._-]{0,63})?"
)
Trigger = Literal["provisioning", "model_loading", "saturated", "unhealthy"]
DEFAULT_TRIGGERS: Final[tuple[Trigger, ...]] = ("provisioning", "model_loading")


def is_remote_adapter(adapter_path: str | None) -> bool:
    """Whether a profile's adapter forwards to an upstream instead of running weights here."""
    return bool(adapter_path) and str(adapter_path).startswith(REMOTE_ADAPTER_PREFIX)


class Routing(_Strict):
    """How a request for the bare model id chooses between the local and the remote profile
    (``sie.server.remote.routing`` acts on it): ``remote_only`` for a model without weights here,
    ``fallback`` to the remote ``fallback_profile`` when the local one refuses for one of ``triggers``,
    ``threshold`` (validated as the public server does; served as ``fallback`` is not: see there)."""

    policy: Literal["remote_only", "fallback", "threshold"]
    fallback_profile: str | None = None
    triggers: tuple[Trigger, ...] | None = None
    wake_above: float | None = Field(default=None, gt=0)
    sleep_below: float | None = Field(default=None, gt=0)
    window_s: float | None = Field(default=None, gt=0)
    cooldown_s: float | None = Field(default=None, gt=0)

    @property
    def effective_triggers(self) -> frozenset[Trigger]:
        """The refusals that send a request to ``fallback_profile``: those declared, else the default."""
        if self.policy != "fallback":
            return frozenset()
        return frozenset(self.triggers if self.triggers is not None else DEFAULT_TRIGGERS)

    @model_validator(mode="after")
    def _check(self) -> Routing:
        thresholds = [name for name in _THRESHOLD_FIELDS if getattr(self, name) is not None]
        if self.policy == "remote_only":
            if self.fallback_profile is not None or self.triggers is not None or thresholds:
                raise ValueError("routing policy 'remote_only' takes no other field")
            return self
        if not self.fallback_profile:
            raise ValueError(
                f"routing policy '{self.policy}' must name the remote profile in 'fallback_profile'"
            )
        if self.policy == "fallback":
            if thresholds:
                raise ValueError(f"routing policy 'fallback' does not use: {', '.join(thresholds)}")
            if self.triggers is not None and (
                not self.triggers or len(set(self.triggers)) != len(self.triggers)
            ):
                raise ValueError("routing.triggers must name each trigger once, at least one")
            return self
        if self.triggers is not None:
            raise ValueError("routing policy 'threshold' does not use 'triggers'")
        missing = [name for name in _THRESHOLD_FIELDS if getattr(self, name) is None]
        if missing:
            raise ValueError(f"routing policy 'threshold' must set: {', '.join(missing)}")
        if (
            self.sleep_below is not None
            and self.wake_above is not None
            and self.sleep_below >= self.wake_above
        ):
            raise ValueError("routing.sleep_below must be lower than routing.wake_above")
        return self


class ResolvedProfile(_Strict):
    """A profile after ``extends`` is applied: every field a loader needs is present."""

    name: str
    max_batch_tokens: int
    compute_precision: ComputePrecision | None
    adapter_path: str
    loadtime: dict[str, Any]
    runtime: dict[str, Any]
    # A generative profile's paged KV cache (tokens) and chat template arguments (``enable_thinking``).
    kv_budget_tokens: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @property
    def is_remote(self) -> bool:
        return is_remote_adapter(self.adapter_path)

    @property
    def upstream(self) -> str | None:
        """The upstream a remote profile calls (validated with the model), else None."""
        name = self.loadtime.get("upstream") if self.is_remote else None
        return name if isinstance(name, str) else None


class ModelConfig(_Strict):
    sie_id: str = Field(min_length=1)
    hf_id: str | None = None
    weights_path: str | None = None
    hf_revision: str | None = None
    # The tokenizer repositories a model also reads, pinned: the public server digests them into a
    # profile's identity; weights resolve here without them.
    hf_tokenizer_dependencies: dict[str, str] = Field(default_factory=dict)
    package_backed: bool = False
    remote_backed: bool = False
    routing: Routing | None = None
    pool: str | None = None
    inputs: Inputs = Field(default_factory=Inputs)
    tasks: Tasks = Field(default_factory=Tasks)
    max_sequence_length: int | None = Field(default=None, gt=0)
    profiles: dict[str, Profile]

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if self.package_backed:
            if self.hf_id or self.weights_path or self.hf_revision:
                raise ValueError("package_backed models take none of hf_id, weights_path, hf_revision")
        elif self.remote_backed and (self.hf_id or self.weights_path or self.hf_revision):
            raise ValueError("'remote_backed' models take none of hf_id, weights_path, hf_revision")
        elif not (self.hf_id or self.weights_path or self.remote_backed):
            raise ValueError("one of hf_id or weights_path is required")
        if not self.profiles:
            raise ValueError("profiles must name at least one profile")
        if self.routing is not None and self.routing.fallback_profile not in (None, *self.profiles):
            raise ValueError(f"routing.fallback_profile '{self.routing.fallback_profile}' is not a profile")
        for name, profile in self.profiles.items():
            if profile.extends is None:
                missing = [f for f in ("max_batch_tokens", "adapter_path") if getattr(profile, f) is None]
                if missing:
                    raise ValueError(f"profile '{name}' needs {', '.join(missing)} (or 'extends')")
                continue
            parent = self.profiles.get(profile.extends)
            if parent is None:
                raise ValueError(f"profile '{name}' extends unknown profile '{profile.extends}'")
            if parent.extends is not None:
                raise ValueError(
                    f"profile '{name}' extends '{profile.extends}', which itself extends: one level only"
                )
        for name in self.profiles:
            _check_remote_profile(name, self.resolve_profile(name), self.remote_backed)
        if self.routing is not None:
            self._check_routing(self.routing)
        return self

    def _check_routing(self, routing: Routing) -> None:
        """A routing policy chooses between a local ``default`` profile and one remote profile."""
        if routing.policy == "remote_only":
            if not self.remote_backed:
                raise ValueError(
                    "routing policy 'remote_only' is for a model without local weights; set "
                    "'remote_backed: true' and remove 'hf_id', 'weights_path' and 'package_backed'"
                )
            return
        if self.remote_backed:
            raise ValueError(
                f"a 'remote_backed' model has no local profile, so it cannot use routing policy '{routing.policy}'"
            )
        if "default" not in self.profiles or self.resolve_profile("default").is_remote:
            raise ValueError(f"routing policy '{routing.policy}' needs a local 'default' profile")
        fallback = routing.fallback_profile
        if fallback == "default" or fallback is None or not self.resolve_profile(fallback).is_remote:
            raise ValueError(f"routing.fallback_profile '{fallback}' must name a remote, non-default profile")

    def resolve_profile(self, name: str) -> ResolvedProfile:
        """Child scalars win when set; a non-empty child ``loadtime``/``runtime`` replaces the parent's."""
        profile = self.profiles[name]
        base = self.profiles[profile.extends] if profile.extends else profile
        child, parent = profile.adapter_options, base.adapter_options
        return ResolvedProfile(
            name=name,
            max_batch_tokens=profile.max_batch_tokens or base.max_batch_tokens or 0,
            compute_precision=profile.compute_precision or base.compute_precision,
            adapter_path=profile.adapter_path or base.adapter_path or "",
            loadtime=child.loadtime or parent.loadtime,
            runtime=child.runtime or parent.runtime,
            kv_budget_tokens=profile.kv_budget_tokens or base.kv_budget_tokens,
            chat_template_kwargs=profile.chat_template_kwargs or base.chat_template_kwargs,
        )

    @cached_property
    def loras(self) -> Mapping[str, str]:
        """The LoRAs its profiles declare (``adapter_options.runtime.lora_id``, the public field), each
        with the first profile naming it: the only ids a request may name for this model besides the
        operator's LoRA root (``weights.lora_sources``). Read on every request that names a LoRA, so
        worked out once."""
        declared: dict[str, str] = {}
        for name in self.profiles:
            lora = self.resolve_profile(name).runtime.get("lora_id")
            if isinstance(lora, str) and lora:
                declared.setdefault(lora, name)
        return MappingProxyType(declared)

    def output_types(self) -> frozenset[Capability]:
        """The encode outputs the YAML declares: the one source a request's output types are checked by."""
        return (
            frozenset(Capability(n) for n in self.tasks.encode.dims()) if self.tasks.encode else frozenset()
        )


def _check_remote_profile(name: str, profile: ResolvedProfile, remote_backed: bool) -> None:
    """A remote profile names an upstream and its model (never defines one: the operator's upstreams
    file does); a ``remote_backed`` model has only remote profiles."""
    if not profile.is_remote:
        if remote_backed:
            raise ValueError(f"profile '{name}' of a 'remote_backed' model must use a remote adapter")
        return
    loadtime = profile.loadtime
    unsupported = sorted(set(loadtime) - REMOTE_LOADTIME_KEYS - REMOTE_OPTIONAL_LOADTIME_KEYS)
    if unsupported:
        raise ValueError(
            f"remote profile '{name}' takes only upstream, upstream_model and max_seq_length in "
            f"loadtime; remove: {', '.join(unsupported)}"
        )
    missing = [key for key in sorted(REMOTE_LOADTIME_KEYS) if not loadtime.get(key)]
    if missing:
        raise ValueError(f"remote profile '{name}' must set loadtime: {', '.join(missing)}")
    upstream, model = loadtime["upstream"], loadtime["upstream_model"]
    if not isinstance(upstream, str) or not UPSTREAM_NAME.fullmatch(upstream):
        raise ValueError(
            f"remote profile '{name}': 'upstream' must be an upstream name "
            "(lowercase letters, digits and hyphens, at most 63)"
        )
    if not isinstance(model, str) or not UPSTREAM_MODEL.fullmatch(model):
        raise ValueError(
            f"remote profile '{name}': 'upstream_model' must be a model id such as 'org/name' or 'org/name:tag'"
        )
    length = loadtime.get("max_seq_length")
    if length is not None and (
        name == "default" or isinstance(length, bool) or not isinstance(length, int) or length <= 0
    ):
        raise ValueError(
            f"remote profile '{name}': 'max_seq_length' must be a positive integer, on a non-default profile"
        )


# libyaml's parser when PyYAML was built with it: every start parses the whole catalogue, and over the
# 41 shipped files the pure-Python parser took 84 ms against 6.5 ms (same safe subset of YAML).
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ModelConfigError(ValueError):
    """A model YAML is invalid; the message names the file, the field and the reason."""


def load_model_config(path: Path) -> ModelConfig:
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise ModelConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{path}: expected a mapping at the top level")
    try:
        return ModelConfig.model_validate(raw)
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
        )
        raise ModelConfigError(f"{path}: {reasons}") from exc


def load_model_dir(directory: Path) -> list[tuple[Path, ModelConfig]]:
    """Every ``*.yaml``/``*.yml`` in ``directory``; duplicate ``sie_id``s are an error."""
    if not directory.is_dir():
        raise ModelConfigError(f"{directory}: models directory does not exist")
    configs: list[tuple[Path, ModelConfig]] = []
    seen: dict[str, Path] = {}
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        config = load_model_config(path)
        if config.sie_id in seen:
            raise ModelConfigError(
                f"{path}: sie_id '{config.sie_id}' is already defined in {seen[config.sie_id]}"
            )
        seen[config.sie_id] = path
        configs.append((path, config))
    return configs
