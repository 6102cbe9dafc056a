"""The server's configuration (``sie-server serve``, HTTP and queue-worker modes alike): ``SIE_*``
environment variables, overridden by CLI flags; the groups other processes share are in ``common``.

Names, defaults and meanings follow the public SIE, so a deployment's environment carries over.
Components never read this object: the composition root (``server.app``) hands each a small value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import AliasChoices, BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from sie.catalog.follower import FollowerSettings
from sie.core.cpus import usable_cpus
from sie.core.options import AttentionBackend, ComputePrecision
from sie.engine.oom import DEFAULT_STRATEGY, OomAction, OomRecovery
from sie.engine.pixels import ImageLimits
from sie.settings.common import Auth, Catalogue, Cluster, Logging, SieSettings, Tracing, split_csv
from sie.weights.lora_sources import DEFAULT_MAX_BYTES as DEFAULT_LORA_MAX_BYTES
from sie.weights.lora_sources import LoraSettings


class OomRecoverySettings(BaseModel):
    """``SIE_OOM_RECOVERY__*``: what a batch that runs out of device memory tries (``engine.oom``)."""

    enabled: bool = Field(
        default=True, description="Recover from out of memory in a batch (false: fail it at once)."
    )
    strategy: Annotated[list[OomAction], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_STRATEGY),
        min_length=1,
        description="Steps in order: cache_clear, evict_lru, split_batch (a JSON list or comma-separated; "
        "repeats are dropped; split_batch is the last step taken).",
    )
    max_split_depth: int = Field(
        default=4, ge=0, le=8, description="Halvings of a split batch (4: up to 16 pieces)."
    )
    eviction_lock_timeout_s: float = Field(
        default=5.0, ge=0.1, le=60, description="Seconds evict_lru may take before the next step runs."
    )
    retry_after_s: int = Field(default=5, ge=1, le=60, description="Retry-After of a 503 RESOURCE_EXHAUSTED.")

    @field_validator("strategy", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        """``["cache_clear", "split_batch"]`` (the public JSON form) or ``cache_clear,split_batch``."""
        if isinstance(value, str):
            text = value.strip()
            return json.loads(text) if text.startswith("[") else split_csv(text)
        return value

    def plan(self, disabled: bool) -> OomRecovery:
        return OomRecovery(
            self.enabled and not disabled,
            tuple(dict.fromkeys(self.strategy)),
            self.max_split_depth,
            self.eviction_lock_timeout_s,
            self.retry_after_s,
        )


# What a public AdaptiveBatchingConfig value may be: the public names, any value (none is used here).
_Knob = bool | int | float | str | None


class AdaptiveBatchingSettings(BaseModel):
    """``SIE_ADAPTIVE_BATCHING__*``: the public server's latency-steered batch wait. Our batcher fills
    a batch with whatever has arrived by tokens and never waits for a latency target
    (docs/architecture.md), so these are read, answered with one warning, and otherwise unused; a
    profile's ``adaptive_batching`` is likewise accepted (``catalog.model_config.AdaptiveBatching``)."""

    enabled: _Knob = None
    target_p50_ms: _Knob = None
    calibration_multiplier: _Knob = None
    min_target_p50_ms: _Knob = None
    max_target_p50_ms: _Knob = None
    min_wait_ms: _Knob = None
    max_wait_ms: _Knob = None
    gain: _Knob = None
    integral_gain: _Knob = None
    window_size: _Knob = None
    update_interval: _Knob = None
    starvation_recovery_enabled: _Knob = None
    starvation_window: _Knob = None
    starvation_batch_size: _Knob = None

    def named(self) -> list[tuple[str, bool]]:
        return [(f"SIE_ADAPTIVE_BATCHING__{name.upper()}", value is not None) for name, value in self]


_TRUE: Final = frozenset({"1", "true", "yes"})  # the public server's spellings of "telemetry off"


class Telemetry(SieSettings):
    """The public server's anonymous usage heartbeat and its variables. This server sends no telemetry
    at all: turning it off (``SIE_TELEMETRY_DISABLED``, ``DO_NOT_TRACK``) is what it already does,
    ``SIE_VARIANT`` and ``SIE_DATA_DIR`` only shape a heartbeat never sent, so those are silent; a
    ``SIE_TELEMETRY_URL`` (telemetry pointed at the operator's own collector) gets one warning, since
    that collector will receive nothing."""

    telemetry_disabled: str | None = Field(None, description="Read: this server sends no telemetry.")
    telemetry_url: str | None = Field(
        None, description="Read and warned about: this server sends no telemetry, to this URL or any."
    )
    variant: str | None = Field(None, description="Read: the public heartbeat's image variant (none sent).")
    data_dir: str | None = Field(None, description="Read: where the public heartbeat keeps its id (none).")
    do_not_track: str | None = Field(None, validation_alias=AliasChoices("DO_NOT_TRACK"))

    def telemetry_asked(self) -> list[tuple[str, bool]]:
        off = (self.telemetry_disabled or "").strip().lower() in _TRUE or self.do_not_track == "1"
        return [("SIE_TELEMETRY_URL", bool(self.telemetry_url) and not off)]


class Settings(Auth, Catalogue, Cluster, Logging, Tracing, Telemetry):
    model_config = SettingsConfigDict(env_nested_delimiter="__")

    host: str = Field("0.0.0.0", description="Interface to listen on (CLI --host).")
    port: int = Field(8080, ge=0, le=65535, description="TCP port (CLI --port).")
    device: str = Field("auto", description="auto (cuda > mps > cpu), cuda, cuda:N, mps or cpu.")
    devices: str | None = Field(
        None,
        description="Comma-separated devices this server may use (cuda:0, ...): each must exist and share "
        "SIE_DEVICE's family. One device per server process: more than one refuses the start.",
    )
    hot_reload: bool = Field(
        True, description="Apply YAMLs added, changed or deleted in a local models dir without a restart."
    )
    model_filter: str | None = Field(None, description="Comma-separated model ids to serve (CLI --models).")
    bundle: str | None = Field(
        None,
        description="Serve only the models whose adapters the bundle lists (CLI --bundle; excludes --models). "
        "Reported as the worker's bundle on /ws/status ('default' when unset).",
    )
    pool: str = Field("", description="Pool name reported on /ws/status (pool_name).")
    machine_profile: str | None = Field(
        None,
        description="Machine profile reported on /ws/status and the queue lane's (default: SIE_GPU_TYPE, "
        "else on /ws/status the detected GPU type and in the queue 'default').",
    )
    gpu_type: str | None = Field(
        None,
        description="Overrides the detected GPU type (l4, a100-80gb, h100...) reported for routing: each "
        "/ws/status GPU's gpu_type, and the machine profile when SIE_MACHINE_PROFILE is unset.",
    )
    adaptive_min_quantum_ms: float = Field(
        2.0, gt=0, description="Queue mode: the pull loop's shortest wait for work."
    )
    adaptive_max_quantum_ms: float = Field(
        15.0, gt=0, description="Queue mode: the pull loop's longest wait for work."
    )
    adaptive_target_p50_ms: float = Field(
        50.0,
        gt=0,
        description="Queue mode: the p50 latency of answered items the pull loop's wait is steered to.",
    )
    worker_ping_interval_ms: float = Field(
        2000, gt=0, description="Queue mode: how often the worker checks its NATS connection (readiness)."
    )
    worker_readyz_stale_mult: float = Field(
        3, gt=0, description="Queue mode: /readyz fails after this many ping intervals without an answer."
    )
    worker_metrics_port: int = Field(
        9095, ge=0, le=65535, description="Queue mode: port of /healthz, /readyz and /metrics (0: none)."
    )
    nak_delay_s: float = Field(
        5.0,
        ge=0,
        description="Queue mode: first redelivery delay of an item whose model is loading (later ones grow, "
        "within the item's deadline).",
    )
    oom_nak_delay_s: float = Field(
        10.0,
        ge=0,
        description="Queue mode: first redelivery delay of an item whose batch ran out of device memory.",
    )
    max_deliver: int = Field(
        20,
        ge=1,
        description="Queue mode: deliveries of an item before JetStream gives up on it (the lane consumer's "
        "max_deliver; the dead-letter advisory follows).",
    )
    nats_fetch_budget: int = Field(
        64,
        ge=1,
        description="Queue mode: most work items one pull asks JetStream for (fewer when fewer fit in "
        "SIE_MAX_CONCURRENT_BATCHES x items per batch).",
    )
    nats_hold_s: float = Field(
        2.0,
        ge=0,
        description="Queue mode: a worker holds at most the items it finishes in this many seconds at "
        "its own recent pace, so a slow worker leaves the rest to faster ones (0: no such limit).",
    )
    cluster_routing: str | None = Field(
        None,
        description="queue (what the chart sets) or unset: this server is a queue worker whenever "
        "SIE_NATS_URL is set. queue without SIE_NATS_URL, or any other value, refuses the start.",
    )
    adaptive_batching: AdaptiveBatchingSettings = Field(
        default=AdaptiveBatchingSettings(),
        description="SIE_ADAPTIVE_BATCHING__*: read and warned about; our batcher waits for no latency target.",
    )
    gateway_url: str | None = Field(None, description="Queue mode: the gateway asked for pool admission.")
    pool_admission_enabled: bool = Field(
        True, description="Queue mode: a worker of a named pool pulls only while the pool is leased."
    )
    max_concurrent_batches: int = Field(
        4, ge=1, description="Queue mode: batches' worth of items the worker holds at once."
    )
    batcher_coalesce_ms: float | None = Field(
        None, ge=0, description="Queue mode: replaces SIE_MAX_BATCH_WAIT_MS (a batch's fill window)."
    )
    batcher_max_batch_requests: int | None = Field(
        None, ge=1, description="Queue mode: replaces SIE_MAX_BATCH_REQUESTS (items per batch)."
    )
    rust_pipeline_depth: int = Field(
        2, ge=1, description="Batches per model at once: one running, the others formed and waiting."
    )
    gpu_count: int | None = Field(None, ge=0, description="Queue mode: GPUs advertised (default: detected).")
    worker_config_poll_interval_ms: float = Field(
        30000, gt=0, description="How often sie-config's epoch is read to recover missed deltas."
    )
    worker_config_full_export_interval_ms: float = Field(
        300000, ge=0, description="How often sie-config's whole export is read regardless (0: never)."
    )
    worker_id: str | None = Field(
        None,
        description="This worker's id on the queue (default: HOSTNAME, then POD_NAME, then the host name).",
    )
    preload_models: str | None = Field(None, description="Comma-separated model ids loaded before serving.")
    upstreams_file: Path | None = Field(
        None,
        description="YAML file of the upstreams remote profiles call (CLI --upstreams-file): names, base "
        "URLs, the environment variable holding each key, rate caps. Read once at startup.",
    )
    remote_serving: str | None = Field(
        None,
        description="Switch over every remote profile (CLI --remote-serving/--no-remote-serving): unset or "
        "1/true/yes/on serves them; any other value refuses them and sends nothing upstream.",
    )
    local_cache: Path | None = Field(
        None, description="Weight cache folder (HF hub layout); default $HF_HOME/hub."
    )
    cluster_cache: str | None = Field(
        None,
        description="Shared weight cache in the HF hub layout: s3://bucket/prefix, gs://bucket/prefix or a "
        "folder; a model missing locally is copied from it into the local cache.",
    )
    hf_fallback: bool = Field(True, description="Download from the Hugging Face Hub after a cache miss.")
    disk_cache_enabled: bool = Field(
        True, description="Evict least recently used models from the local cache before a copy or download."
    )
    disk_pressure_threshold_percent: float = Field(
        85.0,
        gt=0,
        le=100,
        description="Local cache filesystem usage (%) above which cached models are evicted before a fetch.",
    )
    max_batch_requests: int = Field(64, ge=1, description="Most items in one forward batch.")
    max_batch_wait_ms: float = Field(
        10.0, ge=0, description="Most ms a queued item waits for its batch to fill while the model is busy."
    )
    max_concurrent_requests: int = Field(512, ge=1, description="Most items queued or running per model.")
    max_image_pixels: int = Field(
        ImageLimits.max_image_pixels,
        ge=1,
        description="Most pixels (width x height, read from the header before decoding) of one image; "
        "400 beyond. At most Pillow's 89,478,485 (ours, not public).",
    )
    max_request_pixels: int = Field(
        ImageLimits.max_request_pixels,
        ge=1,
        description="Most pixels of one request's images together, from their headers before any is "
        "decoded; 400 beyond. At least SIE_MAX_IMAGE_PIXELS (ours, not public).",
    )
    max_inflight_pixels: int = Field(
        ImageLimits.max_inflight_pixels,
        ge=1,
        description="Most pixels of images held decoded at once, across the requests (or queue work items) "
        "being prepared, queued and run; a request waits for room. At least SIE_MAX_REQUEST_PIXELS "
        "(ours, not public).",
    )
    memory_pressure_threshold_percent: float = Field(
        85.0,
        ge=50,
        le=99,
        description="Device memory use (percent) above which least recently used models are evicted.",
    )
    idle_evict_s: float | None = Field(
        None, ge=10, le=86400, description="Unload a model unused this many seconds (unset: never)."
    )
    pinned_models: str | None = Field(
        None,
        description="Comma-separated model ids loaded at start and never evicted (memory pressure, idle, "
        "another model's out of memory).",
    )
    extra_models: str | None = Field(
        None,
        description="Comma-separated model ids (profile variants included) served beside the --models or "
        "--bundle selection; an id not in the models dir refuses the start.",
    )
    memory_limit_bytes: int | None = Field(
        None,
        ge=1,
        description="A budget for model weights on the device; replaces the device gauge (ours, not public).",
    )
    max_loras_per_model: int = Field(
        10, ge=1, description="LoRA adapters kept loaded per model; the least recently used is evicted."
    )
    lora_root: Path | None = Field(
        None,
        description="Folder of LoRA adapters a request may name by folder name (options.lora_id: letters, "
        "digits, '.', '_', '-'; never a path). Unset: only the LoRAs the model's profiles declare.",
    )
    lora_hf_fallback: bool = Field(
        False,
        description="Download a LoRA a profile declares from the Hugging Face Hub when no cache holds it "
        "(off: the local and cluster caches only).",
    )
    lora_max_bytes: int = Field(
        DEFAULT_LORA_MAX_BYTES,
        ge=1,
        description="Largest LoRA copied from the cluster cache or downloaded, in bytes (the files it reads).",
    )
    lora_cache: Path | None = Field(
        None,
        description="Folder (Hugging Face hub layout) LoRA copies and downloads go to, outside the models' "
        "disk LRU; default: sie-loras in the local weight cache.",
    )
    preprocessor_workers: int | None = Field(
        None, ge=1, description="Tokenization threads (unset: 4, or 1 when models run on the CPU)."
    )
    image_workers: int | None = Field(
        None,
        ge=1,
        description="Threads that check and decode the images of requests carrying any (unset: 4, or 1 "
        "when models run on the CPU); text-only requests use the tokenization threads.",
    )
    instrumentation: bool = Field(
        False,
        description="Detailed batch statistics: one log line per batch (items, requests, tokens, padding, "
        "wait, forward) and each model's summary when it stops.",
    )
    ipc_socket_path: str | None = Field(
        None, description="Read and logged as having no effect: no sidecar, the queue client runs in process."
    )
    ipc_pool_size: str | None = Field(
        None, description="Read and logged as having no effect: no sidecar, the queue client runs in process."
    )
    default_compute_precision: ComputePrecision = Field(
        ComputePrecision.FLOAT16,
        description="Precision when the profile sets none (CPU: bf16 autocast with bf16 hardware, else float32).",
    )
    attention_backend: AttentionBackend = Field(
        AttentionBackend.AUTO,
        description="Attention kernels: auto and flash_attention_2 (flash where it runs: CUDA, float16/"
        "bfloat16), sdpa (fused SDPA kernels, no varlen), eager (reference math). Never cuDNN.",
    )
    intra_op_threads: int | None = Field(
        None,
        ge=1,
        description="Threads for one forward pass (torch/ONNX Runtime); default: the cores this process may use (affinity, cgroup quota).",
    )
    drain_timeout_s: float = Field(
        25.0,
        ge=0,
        description="After SIGTERM, most seconds to wait for requests in flight before the listener closes "
        "(meanwhile /readyz answers 503 and new requests 503 with Retry-After).",
    )
    drain_min_s: float = Field(
        0.0,
        ge=0,
        description="After SIGTERM, least seconds /readyz answers 503 before the listener closes, even with "
        "nothing in flight: set it to the load balancer's probe period so it sees the 503.",
    )
    oom_recovery: OomRecoverySettings = Field(
        default=OomRecoverySettings(), description="Out-of-memory recovery (SIE_OOM_RECOVERY__*)."
    )
    disable_oom_recovery: bool = Field(
        False, description="Kill switch: no out-of-memory recovery, whatever SIE_OOM_RECOVERY__ENABLED says."
    )
    access_log: bool = Field(
        False,
        description="One log line per HTTP request (uvicorn's access log). Off: at high request rates it "
        "cost up to a third of the event loop; sie_requests_total counts every request either way.",
    )

    def queue_mode(self) -> bool:
        """Whether this server pulls work from the queue: with ``SIE_NATS_URL``. ``SIE_CLUSTER_ROUTING``
        (the public switch) may say ``queue`` and nothing else: the public server's other mode (a
        direct HTTP route from the gateway) is one the gateway no longer has either."""
        routing = (self.cluster_routing or "").strip().lower()
        if routing not in ("", "queue"):
            raise ValueError(
                f"SIE_CLUSTER_ROUTING={self.cluster_routing!r}: only 'queue' is served (work comes through "
                "NATS JetStream, the gateway's only route to workers); set it to queue or unset it"
            )
        if routing == "queue" and not self.nats_servers():
            raise ValueError("SIE_CLUSTER_ROUTING=queue needs SIE_NATS_URL (the cluster's NATS server)")
        return bool(self.nats_servers())

    def moot_variables(self) -> list[tuple[list[tuple[str, bool]], str]]:
        """The public variables set here that this server reads and does not act on, each group with
        why (``common.warn_without_effect`` says so once at start)."""
        return [
            (
                [
                    ("SIE_IPC_SOCKET_PATH", bool(self.ipc_socket_path)),
                    ("SIE_IPC_POOL_SIZE", bool(self.ipc_pool_size)),
                ],
                # The public worker pod talks to its sidecar over a socket, through a pool of
                # connections; docs/cluster.md says why ours has none.
                "this server runs its queue client in the model process (no sidecar and no IPC socket), "
                "so there is nothing to connect to",
            ),
            (
                self.adaptive_batching.named(),
                "this server's batcher forms a batch from what has arrived, bounded by tokens and "
                "SIE_MAX_BATCH_WAIT_MS, and steers no batch wait to a latency target",
            ),
            (self.telemetry_asked(), "this server sends no telemetry, to that URL or any other"),
        ]

    def oom_plan(self) -> OomRecovery:
        return self.oom_recovery.plan(self.disable_oom_recovery)

    def gpu_type_override(self) -> str | None:
        """``SIE_GPU_TYPE`` as the public server reports it (lower case), or None to detect."""
        return self.gpu_type.strip().lower() if self.gpu_type and self.gpu_type.strip() else None

    def profile(self) -> str | None:
        """The machine profile this worker announces: ``SIE_MACHINE_PROFILE``, else ``SIE_GPU_TYPE``."""
        return self.machine_profile or self.gpu_type_override()

    def lora_settings(self) -> LoraSettings:
        return LoraSettings(self.lora_root, self.lora_hf_fallback, self.lora_max_bytes, self.lora_cache)

    def filter_list(self) -> list[str]:
        return split_csv(self.model_filter)

    def preload_list(self) -> list[str]:
        return split_csv(self.preload_models)

    def pinned_list(self) -> list[str]:
        return split_csv(self.pinned_models)

    def extra_list(self) -> list[str]:
        return split_csv(self.extra_models)

    def device_list(self) -> list[str]:
        return split_csv(self.devices)

    def follower_settings(self) -> FollowerSettings | None:
        return self.follower(self.worker_config_poll_interval_ms, self.worker_config_full_export_interval_ms)

    def batch_items(self) -> int:
        """Items per batch: a queue worker's ``SIE_BATCHER_MAX_BATCH_REQUESTS`` when set."""
        if self.nats_servers() and self.batcher_max_batch_requests is not None:
            return self.batcher_max_batch_requests
        return self.max_batch_requests

    def batch_wait_ms(self) -> float:
        """A batch's fill window: a queue worker's ``SIE_BATCHER_COALESCE_MS`` when set."""
        if self.nats_servers() and self.batcher_coalesce_ms is not None:
            return self.batcher_coalesce_ms
        return self.max_batch_wait_ms

    def threads(self) -> int:
        return self.intra_op_threads or usable_cpus()

    def tokenizer_threads(self, device: str) -> int:
        """One on a CPU device: the forward pass already uses every core, and each extra tokenizer
        thread that wakes up preempts one of its OpenMP threads, stalling the others at the next
        barrier. Elsewhere tokenization has the host cores to itself."""
        if self.preprocessor_workers is not None:
            return self.preprocessor_workers
        return 1 if device.startswith("cpu") else 4

    def image_threads(self, device: str) -> int:
        """``SIE_IMAGE_WORKERS``, else the tokenizer's rule: decoding competes with a CPU forward too."""
        if self.image_workers is not None:
            return self.image_workers
        return 1 if device.startswith("cpu") else 4

    def image_limits(self) -> ImageLimits:
        return ImageLimits(self.max_image_pixels, self.max_request_pixels, self.max_inflight_pixels)

    @model_validator(mode="after")
    def _pixel_limits_nest(self) -> Settings:
        """Refuse at start what ``ImageLimits`` would: limits that cannot all be met."""
        self.image_limits()
        return self
