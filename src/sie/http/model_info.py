"""One catalogue entry as ``/v1/models`` shows it: the server fills in its slot's state, the gateway
the state its workers' heartbeats report. Imports nothing that loads models, so the gateway stays light."""

from __future__ import annotations

from typing import Final

from sie.catalog.catalog import CatalogEntry
from sie.catalog.errors import ModelNotServed
from sie.catalog.families import not_served
from sie.core.instance import RUNTIME_INSTANCE
from sie.wire.errors import ErrorCode
from sie.wire.responses import ModelCapabilities, ModelError, ModelInfo, ModelRouting, ProfileInfo

# The public server's order of ``outputs``: the encode outputs, then the other operations.
_ENCODE_ORDER: Final = ("dense", "sparse", "multivector")


def entry_info(
    entry: CatalogEntry, state: str, loaded: bool, last_error: ModelError | None = None
) -> ModelInfo:
    """One catalogue entry as ``/v1/models`` shows it; the gateway renders its own from heartbeats.
    A ``{sie_id}:{profile}`` variant lists its profile as its only (default) one and takes its
    ``loadtime.max_seq_length``; a family this release does not run shows as failed with
    ``MODEL_NOT_SERVED``, the error a request for it gets."""
    config = entry.config
    declared = {c.value for c in config.output_types()}
    outputs: list[str] = [name for name in _ENCODE_ORDER if name in declared]
    for task, output in (("score", "score"), ("extract", "json"), ("generate", "tokens")):
        if getattr(config.tasks, task) is not None:
            outputs.append(output)
    family = not_served(entry.profile.adapter_path)
    if family is not None and last_error is None:
        message = str(ModelNotServed(entry.name, entry.profile.adapter_path, family))
        state, last_error = "failed", ModelError(ErrorCode.MODEL_NOT_SERVED, message, 0, True)
    if entry.name != config.sie_id:  # a variant: its own profile is its default
        profiles = {"default": ProfileInfo(is_default=True, runtime_instance_id=RUNTIME_INSTANCE)}
    else:
        profiles = {
            name: ProfileInfo(is_default=name == entry.profile.name, runtime_instance_id=RUNTIME_INSTANCE)
            for name in config.profiles
        }
    generate = config.tasks.generate
    routing_policy = config.routing.policy if config.routing else None
    if config.remote_backed:
        routing_policy = "remote_only"
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
        routing=ModelRouting(policy=routing_policy),
    )
