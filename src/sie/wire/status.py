"""The worker status message (the public ``WorkerStatusMessage``): what ``/ws/status`` pushes and what a
gateway routes on (``ready``, ``machine_profile``, ``bundle``, ``bundle_config_hash``,
``loaded_models``, ``max_batch_requests``); people (``sie-top``) read the rest. Field order is the
public server's, which JSON keeps."""

from __future__ import annotations

import msgspec


class GpuStatus(msgspec.Struct):
    device: str
    name: str
    gpu_type: str
    utilization_pct: int
    memory_used_bytes: int
    memory_total_bytes: int
    memory_threshold_pct: float


class ModelConfigStatus(msgspec.Struct):
    hf_id: str | None
    adapter: str
    inputs: list[str]
    outputs: list[str]
    dims: dict[str, int] | None
    max_sequence_length: int | None


class ModelStatus(msgspec.Struct):
    name: str
    state: str
    device: str | None
    memory_bytes: int
    config: ModelConfigStatus
    queue_depth: int
    queue_pending_items: int


class ServerInfo(msgspec.Struct):
    version: str
    uptime_seconds: int
    user: str
    working_dir: str
    pid: int


class WorkerStatus(msgspec.Struct):
    timestamp: float
    ready: bool
    name: str
    machine_profile: str
    pool_name: str
    gpu_count: int
    bundle: str
    bundle_config_hash: str
    loaded_models: list[str]
    max_batch_requests: int
    saturated: bool
    server: ServerInfo
    gpus: list[GpuStatus]
    models: list[ModelStatus]
    counters: dict[str, float]
    histograms: dict[str, dict[str, float]]
