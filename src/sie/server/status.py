"""The ``/ws/status`` message (``wire.status.WorkerStatus``, the public ``WorkerStatusMessage``) built
from the engine's slots, the drain state and the metrics registry.

A gateway reads ``ready``, ``machine_profile``, ``bundle``, ``bundle_config_hash``, ``loaded_models``
and ``max_batch_requests`` to route; people (``sie-top``) read the rest. Everything here is read-only
and cheap, since it runs every 200 ms per connected client.
"""

from __future__ import annotations

import getpass
import os
import time
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from sie.catalog.bundles import CatalogHash
from sie.engine.engine import Engine
from sie.engine.errors import ModelLoadFailed
from sie.engine.loader import LoadFailure, ModelSlot, ModelState
from sie.http.model_info import entry_info
from sie.observability.gpus import gpu_metrics
from sie.server.lifecycle import Lifecycle
from sie.upstream.pool import UpstreamPool
from sie.wire.errors import ErrorCode
from sie.wire.responses import ModelError, ModelInfo
from sie.wire.status import GpuStatus, ModelConfigStatus, ModelStatus, ServerInfo, WorkerStatus


def model_info(slot: ModelSlot, pool: UpstreamPool | None = None) -> ModelInfo:
    """A slot as ``/v1/models`` shows it. With the server's ``pool``, a remote profile is shown as the
    public server shows it, served: its state is the pool's (``UpstreamPool.state``), never the
    slot's (nothing loads here), and ``routing.upstream_kind`` names its upstream's kind."""
    failure: LoadFailure | ModelLoadFailed | None = slot.failure
    state, loaded = slot.state.value, slot.model is not None
    if pool is not None and slot.entry.profile.is_remote:
        remote, failure = pool.state(slot.entry)
        state, loaded = remote, remote == "loaded"
    error = (
        ModelError(ErrorCode.MODEL_LOAD_FAILED, failure.reason, failure.attempts, failure.permanent)
        if failure
        else None
    )
    return entry_info(slot.entry, state, loaded, error, None if pool is None else pool.kinds)


@dataclass(frozen=True)
class WorkerIdentity:
    """What the worker says about itself, fixed at start."""

    name: str
    machine_profile: str | None  # None: the first GPU's type, or "" without one (SIE_GPU_TYPE: that)
    pool_name: str
    bundle: str
    config_hash: CatalogHash
    max_batch_requests: int
    memory_threshold_pct: float
    version: str
    gpu_type: str | None = None  # SIE_GPU_TYPE: every GPU's reported type; None: detected


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers running as an arbitrary uid)
        return str(os.getuid())


def _models(engine: Engine) -> list[ModelStatus]:
    models: list[ModelStatus] = []
    for slot in engine.slots():
        info = model_info(slot)
        model = slot.model if slot.state is ModelState.LOADED else None
        depth = engine.queue_depth(info.name)
        config = slot.entry.config
        models.append(
            ModelStatus(
                name=info.name,
                state=info.state,
                device=model.device if model is not None else None,
                memory_bytes=model.memory_bytes if model is not None else 0,
                config=ModelConfigStatus(
                    hf_id=config.hf_id,
                    adapter=slot.entry.profile.adapter_path,
                    inputs=info.inputs,
                    outputs=info.outputs,
                    dims=info.dims or None,
                    max_sequence_length=info.max_sequence_length,
                ),
                queue_depth=depth,
                queue_pending_items=depth,
            )
        )
    models.sort(key=lambda m: m.memory_bytes, reverse=True)  # like top: the biggest first
    return models


def _samples(registry: CollectorRegistry) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Counters as ``{"name{label=value,...}": total}`` and histograms as ``{"name{...}": {"count",
    "sum"}}``, from the same registry ``/metrics`` renders."""
    counters: dict[str, float] = {}
    histograms: dict[str, dict[str, float]] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "le")
            if family.type == "counter" and sample.name.endswith("_total"):
                counters[f"{sample.name}{{{labels}}}"] = sample.value
            elif family.type == "histogram" and sample.name.endswith(("_count", "_sum")):
                base, _, part = sample.name.rpartition("_")
                histograms.setdefault(f"{base}{{{labels}}}", {})[part] = sample.value
    return counters, histograms


def status_message(
    engine: Engine, identity: WorkerIdentity, lifecycle: Lifecycle, registry: CollectorRegistry
) -> WorkerStatus:
    gpus = [GpuStatus(**gpu) for gpu in gpu_metrics(identity.memory_threshold_pct, identity.gpu_type)]
    models = _models(engine)
    counters, histograms = _samples(registry)
    machine_profile = identity.machine_profile
    if machine_profile is None:
        machine_profile = gpus[0].gpu_type if gpus else ""
    return WorkerStatus(
        timestamp=time.time(),
        ready=not lifecycle.draining,
        name=identity.name,
        machine_profile=machine_profile,
        pool_name=identity.pool_name,
        gpu_count=len(gpus),
        bundle=identity.bundle,
        bundle_config_hash=identity.config_hash(engine.catalog),
        loaded_models=[m.name for m in models if m.state == ModelState.LOADED.value],
        max_batch_requests=identity.max_batch_requests,
        saturated=False,
        server=ServerInfo(
            version=identity.version,
            uptime_seconds=int(time.time() - lifecycle.started_at),
            user=_user(),
            working_dir=str(Path.cwd()),
            pid=os.getpid(),
        ),
        gpus=gpus,
        models=models,
        counters=counters,
        histograms=histograms,
    )
