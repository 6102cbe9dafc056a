"""One catalogue entry as ``/v1/models`` shows it: the server fills in its slot's state, the gateway
the state its workers' heartbeats report. Imports nothing that loads models, so the gateway stays light."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sie.catalog.catalog import CatalogEntry
from sie.catalog.errors import ModelNotServed
from sie.catalog.families import not_served
from sie.core.instance import RUNTIME_INSTANCE
from sie.wire.errors import ErrorCode
from sie.wire.responses import ModelCapabilities, ModelError, ModelInfo, ModelRouting, ProfileInfo

# The public server's order of ``outputs``: the encode outputs, then the other operations.
_ENCODE_ORDER: Final = ("dense", "sparse", "multivector")


def routing_info(entry: CatalogEntry, upstream_kinds: Mapping[str, str]) -> ModelRouting:
    """How the entry's bare name is served, as the public server says it: ``remote_only`` when its own
    (default) profile is remote, the config's policy when it names a ``fallback_profile``, else local
    (both null); ``upstream_kind`` is the kind of the upstream that remote profile names, null when no
    upstream of that name is loaded. A ``{sie_id}:{profile}`` variant has no routing of its own."""
    config = entry.config
    routing = config.routing if entry.name == config.sie_id else None
    if entry.profile.is_remote:
        policy, upstream = "remote_only", entry.profile.upstream
    elif routing is not None and routing.fallback_profile in config.profiles:
        policy, upstream = routing.policy, config.resolve_profile(routing.fallback_profile).upstream
    else:
        return ModelRouting()
    return ModelRouting(policy=policy, upstream_kind=upstream_kinds.get(upstream or ""))


def entry_info(
    entry: CatalogEntry,
    state: str,
    loaded: bool,
    last_error: ModelError | None = None,
    upstream_kinds: Mapping[str, str] | None = None,
) -> ModelInfo:
    """One catalogue entry as ``/v1/models`` shows it; the gateway renders its own from heartbeats.
    A ``{sie_id}:{profile}`` variant lists its profile as its only (default) one and takes its
    ``loadtime.max_seq_length``; a family this release does not run shows as failed with
    ``MODEL_NOT_SERVED``, the error a request for it gets. ``upstream_kinds`` is given by a process
    that serves remote profiles (the server: its loaded upstreams' kinds), whose caller says their
    state; without it a remote profile is a family this process does not run."""
    config = entry.config
    declared = {c.value for c in config.output_types()}
    outputs: list[str] = [name for name in _ENCODE_ORDER if name in declared]
    for task, output in (("score", "score"), ("extract", "json"), ("generate", "tokens")):
        if getattr(config.tasks, task) is not None:
            outputs.append(output)
    remote_served = upstream_kinds is not None and entry.profile.is_remote
    family = None if remote_served else not_served(entry.profile.adapter_path)
    if family is not None and last_error is None:
        message = str(ModelNotServed(entry.name, entry.profile.adapter_path, family))
        state, last_error = "failed", ModelError(ErrorCode.MODEL_NOT_SERVED, message, 0, True)
    if entry.name != config.sie_id:  # a variant: its own profile is its default
        profiles = {"default": _profile(entry.profile.is_remote, is_default=True)}
    else:
        profiles = {
            name: _profile(config.resolve_profile(name).is_remote, is_default=name == entry.profile.name)
            for name in config.profiles
        }
    generate = config.tasks.generate
    return ModelInfo(
        name=entry.name,
        inputs=config.inputs.names(),
        outputs=outputs,
        dims=config.tasks.encode.dims() if config.tasks.encode else {},
        loaded=loaded,
        state=state,
        last_error=last_error,
        max_sequence_length=entry.max_sequence_length,
        profiles=profiles,
        revision=config.hf_revision,
        capabilities=None if generate is None else ModelCapabilities(**generate.capabilities.model_dump()),
        routing=routing_info(entry, upstream_kinds or {}),
    )


def _profile(remote: bool, is_default: bool) -> ProfileInfo:
    """A remote profile runs in no process of ours, so it names no runtime instance (as the public)."""
    return ProfileInfo(is_default=is_default, runtime_instance_id=None if remote else RUNTIME_INSTANCE)
