"""One catalogue entry as ``/v1/models`` shows it: the server fills in its slot's state, the gateway
the state its workers' heartbeats report. Imports nothing that loads models, so the gateway stays light."""

from __future__ import annotations

from sie.engine.catalog import CatalogEntry
from sie.wire.responses import ModelError, ModelInfo, ProfileInfo


def entry_info(
    entry: CatalogEntry, state: str, loaded: bool, last_error: ModelError | None = None
) -> ModelInfo:
    """One catalogue entry as ``/v1/models`` shows it; the gateway renders its own from heartbeats."""
    config = entry.config
    outputs = sorted(c.value for c in config.output_types())
    if config.tasks.score is not None:
        outputs.append("score")
    if config.tasks.extract is not None:
        outputs.append("json")
    return ModelInfo(
        name=entry.name,
        inputs=config.inputs.names(),
        outputs=outputs,
        dims=config.tasks.encode.dims() if config.tasks.encode else {},
        loaded=loaded,
        state=state,
        last_error=last_error,
        max_sequence_length=config.max_sequence_length,
        profiles={name: ProfileInfo(is_default=name == entry.profile.name) for name in config.profiles},
    )
