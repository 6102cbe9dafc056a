"""Every ``SIE_*`` variable the product pages name (``../shared/seeds``), every one our Helm chart
renders, and every one the public chart renders or the public gateway, worker and sie-config read
(``PUBLIC_CHART_VARIABLES``), is read by something: a settings class declares it, code looks it up by name, or (for the NATS
passwords the chart gives the broker) nats-server's config references it. A variable nothing reads is
one a deployment sets and the product silently ignores; the failure names each.

The seeds' tables run their cells together ("SIE_MAX_BATCH_REQUESTS64Maximum requests per batch"), so
names are derived by a rule (``seed_name``) plus ``RUN_TOGETHER``, the rows the rule cannot split; the
names found are kept here (``SEED_VARIABLES``) so a clone without the seeds checks them too, and the
list is compared with the seeds wherever they are present.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from pydantic import AliasChoices, BaseModel, Field, create_model
from pydantic_settings import BaseSettings

from sie.settings.common import SieSettings
from sie.settings.control import ConfigServiceSettings
from sie.settings.gateway import GatewaySettings
from sie.settings.server import Settings

REPO = Path(__file__).resolve().parent.parent
SEEDS = REPO.parent / "shared" / "seeds"
TEMPLATES = REPO / "deploy" / "helm" / "sie-cluster" / "templates"
SOURCES = REPO / "src" / "sie"
SETTINGS: tuple[type[BaseSettings], ...] = (Settings, GatewaySettings, ConfigServiceSettings)

# A maximal run of capitals, digits and underscores after "SIE_", with a "*" when the page names a
# family of variables ("SIE_GATEWAY_K8S_*").
RUN = re.compile(r"SIE_[A-Z0-9_]*\*?")
# A numeric default, then the description's first capitals: "SIE_MAX_LORAS_PER_MODEL10Maximum".
NUMBER_THEN_WORD = re.compile(r"^(SIE_[A-Z0-9_]*?[A-Z_])(\d+)([A-Z]+)$")

# Rows whose default begins with a capital (None, Auto-detected, Pod hostname, HF_HOME, SIE_POOL):
# where the name ends is a matter of knowing it. Key: the seed text (which must contain it); value:
# the name. Each entry must be needed: the rule alone would read it otherwise.
RUN_TOGETHER = {
    "SIE_MODEL_FILTERNone": "SIE_MODEL_FILTER",
    "SIE_GPU_TYPEAuto-detected": "SIE_GPU_TYPE",
    "SIE_LOCAL_CACHEHF_HOMELocal": "SIE_LOCAL_CACHE",
    "SIE_CLUSTER_CACHENone": "SIE_CLUSTER_CACHE",
    "SIE_NATS_URLNone": "SIE_NATS_URL",
    "SIE_GATEWAY_CONFIGURED_GPUSNone": "SIE_GATEWAY_CONFIGURED_GPUS",
    "SIE_CONFIG_SERVICE_URLNone": "SIE_CONFIG_SERVICE_URL",
    "SIE_PAYLOAD_STORE_URLNone": "SIE_PAYLOAD_STORE_URL",
    "SIE_ADMIN_TOKENNone": "SIE_ADMIN_TOKEN",
    "SIE_AUTH_TOKENSNone": "SIE_AUTH_TOKENS",
    "SIE_IPC_POOL_SIZEMatches": "SIE_IPC_POOL_SIZE",
    "SIE_WORKER_IDPod": "SIE_WORKER_ID",
    "SIE_MACHINE_PROFILESIE_POOLMachine": "SIE_MACHINE_PROFILE",
    "SIE_GATEWAY_URLNone": "SIE_GATEWAY_URL",
}

# What the four seeds name (seed 000's tables and prose; 001-003 name a subset).
SEED_VARIABLES = (
    "SIE_ADAPTIVE_MAX_QUANTUM_MS",
    "SIE_ADAPTIVE_MIN_QUANTUM_MS",
    "SIE_ADAPTIVE_TARGET_P50_MS",
    "SIE_ADMIN_TOKEN",
    "SIE_ATTENTION_BACKEND",
    "SIE_AUTH_MODE",
    "SIE_AUTH_TOKEN",
    "SIE_AUTH_TOKENS",
    "SIE_BATCHER_COALESCE_MS",
    "SIE_BATCHER_MAX_BATCH_REQUESTS",
    "SIE_BUNDLE",
    "SIE_CLUSTER_CACHE",
    "SIE_CONFIG_SERVICE_URL",
    "SIE_DEFAULT_COMPUTE_PRECISION",
    "SIE_DEVICE",
    "SIE_DISK_CACHE_ENABLED",
    "SIE_DISK_PRESSURE_THRESHOLD_PERCENT",
    "SIE_GATEWAY_CONFIGURED_GPUS",
    "SIE_GATEWAY_HEALTH_MODE",
    "SIE_GATEWAY_K8S_*",
    "SIE_GATEWAY_KUBERNETES",
    "SIE_GATEWAY_URL",
    "SIE_GATEWAY_WORKERS",
    "SIE_GPU_COUNT",
    "SIE_GPU_TYPE",
    "SIE_HEALTH_PUBLISH_INTERVAL_MS",
    "SIE_HF_FALLBACK",
    "SIE_IDLE_EVICT_S",
    "SIE_IMAGE_WORKERS",
    "SIE_INSTRUMENTATION",
    "SIE_IPC_POOL_SIZE",
    "SIE_IPC_SOCKET_PATH",
    "SIE_LOCAL_CACHE",
    "SIE_LOG_JSON",
    "SIE_MACHINE_PROFILE",
    "SIE_MAX_BATCH_REQUESTS",
    "SIE_MAX_BATCH_WAIT_MS",
    "SIE_MAX_CONCURRENT_BATCHES",
    "SIE_MAX_CONCURRENT_REQUESTS",
    "SIE_MAX_LORAS_PER_MODEL",
    "SIE_MEMORY_PRESSURE_THRESHOLD_PERCENT",
    "SIE_MODELS_DIR",
    "SIE_MODEL_FILTER",
    "SIE_NATS_CONFIG_TRUSTED_PRODUCERS",
    "SIE_NATS_URL",
    "SIE_PAYLOAD_STORE_URL",
    "SIE_POOL",
    "SIE_POOL_ADMISSION_ENABLED",
    "SIE_PRELOAD_MODELS",
    "SIE_PREPROCESSOR_WORKERS",
    "SIE_RUST_PIPELINE_DEPTH",
    "SIE_TRACING_ENABLED",
    "SIE_WORKER_CONFIG_FULL_EXPORT_INTERVAL_MS",
    "SIE_WORKER_CONFIG_POLL_INTERVAL_MS",
    "SIE_WORKER_ID",
    "SIE_WORKER_METRICS_PORT",
    "SIE_WORKER_PING_INTERVAL_MS",
    "SIE_WORKER_READYZ_STALE_MULT",
)


# What the PUBLIC chart renders and the public gateway, worker and sie-config read: a deployment moved
# from the public chart to ours keeps its values and environment, so each must be read here too. From
# ../shared/reference: sie-cluster.md §3.1 (the gateway's environment) and §5 (the Helm chart's worker,
# gateway and sie-config env), sie-reference.md §6.2 (the worker's) and §7.7 (the gateway's again).
PUBLIC_CHART_VARIABLES = (
    # sie-cluster.md §3.1 and sie-reference.md §7.7: the gateway
    "SIE_GATEWAY_PORT",
    "SIE_GATEWAY_HOST",
    "SIE_GATEWAY_WORKERS",
    "SIE_GATEWAY_KUBERNETES",
    "SIE_GATEWAY_K8S_NAMESPACE",
    "SIE_GATEWAY_K8S_SERVICE",
    "SIE_GATEWAY_K8S_PORT",
    "SIE_GATEWAY_HEALTH_MODE",
    "SIE_NATS_URL",
    "SIE_GATEWAY_REQUEST_TIMEOUT",
    "SIE_GATEWAY_MAX_STREAM_PENDING",
    "SIE_GATEWAY_CONFIGURED_GPUS",
    "SIE_GATEWAY_ENABLE_POOLS",
    "SIE_MULTI_ROUTER",
    "SIE_GATEWAY_HOT_RELOAD",
    "SIE_GATEWAY_WATCH_POLLING",
    "SIE_GATEWAY_POLLING_WATCHER",
    "SIE_BUNDLES_DIR",
    "SIE_MODELS_DIR",
    "SIE_CONFIG_SERVICE_URL",
    "SIE_ADMIN_TOKEN",
    "SIE_PAYLOAD_STORE_URL",
    "SIE_AUTH_MODE",
    "SIE_AUTH_TOKENS",
    "SIE_AUTH_TOKEN",
    "SIE_AUTH_EXEMPT_OPERATIONAL",
    "SIE_NATS_CONFIG_TRUSTED_PRODUCERS",
    "SIE_NATS_CONFIG_TRUST_ANY_PRODUCER",
    "SIE_LOG_LEVEL",
    "SIE_LOG_JSON",
    "SIE_GATEWAY_MACHINE_PROFILES",
    "SIE_PAYLOAD_STORE_TTL",
    # sie-cluster.md §5: the chart's workers (queueRouting) and sie-config
    "SIE_NAK_DELAY_S",
    "SIE_MAX_DELIVER",
    "SIE_STREAM_MAX_AGE_S",
    "SIE_NATS_FETCH_BUDGET",
    "SIE_GPU_TYPE",
    "SIE_MACHINE_PROFILE",
    "SIE_BUNDLE",
    "SIE_DEVICE",
    "SIE_PRELOAD_MODELS",
    "SIE_CLUSTER_ROUTING",
    "SIE_POOL",
    "SIE_CONFIG_STORE_DIR",
    "SIE_CONFIG_RESTORE",
    # sie-reference.md §6.2: the worker
    "SIE_MODEL_FILTER",
    "SIE_MAX_BATCH_REQUESTS",
    "SIE_MAX_BATCH_WAIT_MS",
    "SIE_MAX_CONCURRENT_REQUESTS",
    "SIE_MEMORY_PRESSURE_THRESHOLD_PERCENT",
    "SIE_IDLE_EVICT_S",
    "SIE_DISK_CACHE_ENABLED",
    "SIE_DISK_PRESSURE_THRESHOLD_PERCENT",
    "SIE_MAX_LORAS_PER_MODEL",
    "SIE_PREPROCESSOR_WORKERS",
    "SIE_IMAGE_WORKERS",
    "SIE_ATTENTION_BACKEND",
    "SIE_DEFAULT_COMPUTE_PRECISION",
    "SIE_INSTRUMENTATION",
    "SIE_ADAPTIVE_BATCHING__ENABLED",
    "SIE_ADAPTIVE_BATCHING__TARGET_P50_MS",
    "SIE_ADAPTIVE_BATCHING__CALIBRATION_MULTIPLIER",
    "SIE_ADAPTIVE_BATCHING__MIN_WAIT_MS",
    "SIE_ADAPTIVE_BATCHING__MAX_WAIT_MS",
    "SIE_ADAPTIVE_BATCHING__GAIN",
    "SIE_ADAPTIVE_BATCHING__INTEGRAL_GAIN",
    "SIE_ADAPTIVE_BATCHING__WINDOW_SIZE",
    "SIE_ADAPTIVE_BATCHING__UPDATE_INTERVAL",
    "SIE_OOM_RECOVERY__ENABLED",
    "SIE_OOM_RECOVERY__STRATEGY",
    "SIE_OOM_RECOVERY__MAX_SPLIT_DEPTH",
    "SIE_OOM_RECOVERY__EVICTION_LOCK_TIMEOUT_S",
    "SIE_OOM_RECOVERY__RETRY_AFTER_S",
    "SIE_DISABLE_OOM_RECOVERY",
    "SIE_LOCAL_CACHE",
    "SIE_CLUSTER_CACHE",
    "SIE_HF_FALLBACK",
    "SIE_OOM_NAK_DELAY_S",
    "SIE_ADAPTIVE_TARGET_P50_MS",
    "SIE_TRACING_ENABLED",
    "SIE_TELEMETRY_DISABLED",
    "SIE_TELEMETRY_URL",
    "SIE_VARIANT",
    "SIE_DEPLOYMENT_ENV",
    "SIE_DATA_DIR",
)
REFERENCE = REPO.parent / "shared" / "reference"
# "SIE_GATEWAY_{PORT,HOST}" in the reference's prose: one name per part ("..." is not one).
BRACED = re.compile(r"(SIE_[A-Z0-9_]*)\{([A-Z0-9_,. ]+)\}")


# -- the names the seeds and the chart give -----------------------------------------------------------


def seed_name(run: str) -> str | None:
    """The variable a maximal ``run`` names; None for "SIE_" alone (the prefix, named in prose).
    ``RUN_TOGETHER`` is consulted first by the caller.

    - ``<name><digits><capitals>`` (a number as the default, then the description, "…MODEL10Maximum",
      "…PORT9095SIE server"): the name is what precedes the digits;
    - otherwise the run is the name: a default in lower case ("SIE_DEVICEauto"), a path or "(unset)",
      "=", a space or punctuation ends it. A trailing "_" belongs to the default ("SIE_POOL_default").
    """
    number = NUMBER_THEN_WORD.match(run)
    name = number.group(1) if number else run
    name = name if name.endswith("*") else name.rstrip("_")
    return None if name == "SIE" else name


def seed_names(text: str) -> set[str]:
    names: set[str] = set()
    for match in RUN.finditer(text):
        rest = text[match.start() :]
        known = next((name for raw, name in RUN_TOGETHER.items() if rest.startswith(raw)), None)
        name = known or seed_name(match.group())
        if name is not None:
            names.add(name)
    return names


def chart_names() -> set[str]:
    """Every ``SIE_*`` variable the chart's templates put in a container's env (``- name: SIE_X``);
    a templated part ("SIE_NATS_{{ upper $role }}_PASSWORD") is kept as ``*``."""
    names: set[str] = set()
    for template in sorted(TEMPLATES.glob("*")):
        for match in re.finditer(r"-\s*name:\s*(SIE_(?:[A-Z0-9_]|\{\{[^}]*\}\})+)", template.read_text()):
            names.add(re.sub(r"\{\{[^}]*\}\}", "*", match.group(1)))
    return names


# -- what reads them ----------------------------------------------------------------------------------


def settings_names(classes: Iterable[type[BaseModel]]) -> set[str]:
    """The environment names pydantic-settings reads for each field: its aliases, else prefix + name;
    a nested model under ``env_nested_delimiter`` reads ``PREFIX_FIELD<delimiter>SUB`` for each of its
    own fields."""
    names: set[str] = set()
    for cls in classes:
        config = getattr(cls, "model_config", {})
        prefix = str(config.get("env_prefix", ""))
        delimiter = config.get("env_nested_delimiter")
        for field_name, info in cls.model_fields.items():
            alias = info.validation_alias
            if isinstance(alias, AliasChoices):
                own = [str(choice) for choice in alias.choices if isinstance(choice, str)]
            elif isinstance(alias, str):
                own = [alias]
            else:
                own = [f"{prefix}{field_name}"]
            names.update(name.upper() for name in own)
            nested = info.annotation
            if delimiter and isinstance(nested, type) and issubclass(nested, BaseModel):
                names.update(f"{name}{delimiter}{sub}".upper() for name in own for sub in nested.model_fields)
    return names


def _environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in {"environ", "os"}) or (
        isinstance(node, ast.Attribute) and node.attr == "environ"
    )


def _string(node: ast.expr, constants: dict[str, str]) -> str | None:
    """A string constant, or the module constant a name refers to."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return constants.get(node.id) if isinstance(node, ast.Name) else None


def looked_up_names(root: Path = SOURCES) -> set[str]:
    """``SIE_*`` names code reads from the environment by name: ``os.environ.get("SIE_X")``,
    ``os.getenv``, ``os.environ["SIE_X"]``, directly or through a module constant holding the name."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name) and isinstance(node.value.value, str)
        }

        for node in ast.walk(tree):
            key: str | None = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if node.func.attr in {"get", "getenv", "pop", "setdefault"} and _environ(node.func.value):
                    key = _string(node.args[0], constants)
            elif isinstance(node, ast.Subscript) and _environ(node.value):
                key = _string(node.slice, constants)
            if key and key.startswith("SIE_"):
                names.add(key)
    return names


def reference_names(text: str) -> set[str]:
    """The ``SIE_*`` names reference prose gives, braced families expanded."""
    names = {m.group() for m in re.finditer(r"SIE_[A-Z0-9_]+", text)}
    for match in BRACED.finditer(text):
        parts = (part.strip() for part in match.group(2).split(","))
        names.update(match.group(1) + part for part in parts if part and part != "...")
    return names


def broker_names() -> set[str]:
    """Variables nats-server's config (rendered by the chart) expands: ``$SIE_NATS_WORKER_PASSWORD``."""
    return {
        m.group(1) for t in TEMPLATES.glob("*") for m in re.finditer(r"\$(SIE_[A-Z0-9_]+)", t.read_text())
    }


def reads(classes: Iterable[type[BaseModel]] = SETTINGS) -> set[str]:
    return settings_names(classes) | looked_up_names() | broker_names()


def unread(names: Iterable[str], read: set[str]) -> list[str]:
    """The names nothing in ``read`` covers; a name with ``*`` is a family: some read name must match it."""
    missing = []
    for name in sorted(names):
        if "*" in name:
            pattern = re.compile("^" + ".*".join(map(re.escape, name.split("*"))) + "$")
            if not any(pattern.match(one) for one in read):
                missing.append(name)
        elif name not in read:
            missing.append(name)
    return missing


def assert_all_read(names: Iterable[str], read: set[str], where: str) -> None:
    missing = unread(names, read)
    assert not missing, f"{where} name variables nothing reads: {', '.join(missing)}"


# -- the tests ----------------------------------------------------------------------------------------


def test_every_seed_variable_is_read() -> None:
    assert_all_read(SEED_VARIABLES, reads(), "the seeds")


def test_every_variable_the_chart_renders_is_read() -> None:
    rendered = chart_names()
    assert {"SIE_NATS_URL", "SIE_POOL", "SIE_DEVICE"} <= rendered  # the extraction finds the env lists
    assert_all_read(rendered, reads(), "the chart's templates")


def test_every_variable_the_public_chart_and_gateway_read_is_read() -> None:
    assert len(set(PUBLIC_CHART_VARIABLES)) == len(PUBLIC_CHART_VARIABLES)
    assert_all_read(PUBLIC_CHART_VARIABLES, reads(), "the public chart and gateway")


def test_a_public_gateway_variable_dropped_from_the_settings_fails_and_is_named() -> None:
    """Over a copy of the gateway's settings without the hot-reload fields (nothing else reads them),
    the public list's check names the three variables, the chart's alias among them."""
    dropped = {"gateway_hot_reload", "gateway_watch_polling"}
    fields = {n: (i.annotation, i) for n, i in GatewaySettings.model_fields.items() if n not in dropped}
    trimmed = create_model("Trimmed", __base__=SieSettings, **fields)  # type: ignore[call-overload]
    with pytest.raises(AssertionError) as failed:
        assert_all_read(PUBLIC_CHART_VARIABLES, reads((Settings, trimmed, ConfigServiceSettings)), "public")
    assert str(failed.value).startswith(
        "public name variables nothing reads: SIE_GATEWAY_HOT_RELOAD, SIE_GATEWAY_POLLING_WATCHER, "
        "SIE_GATEWAY_WATCH_POLLING\n"
    )


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference is not beside this clone")
def test_the_public_list_is_what_the_reference_names() -> None:
    text = (REFERENCE / "sie-cluster.md").read_text() + (REFERENCE / "sie-reference.md").read_text()
    named = reference_names(text)
    assert {"SIE_GATEWAY_HOT_RELOAD", "SIE_ADAPTIVE_BATCHING__GAIN"} <= named  # prose and a braced family
    missing = sorted(set(PUBLIC_CHART_VARIABLES) - named)
    assert not missing, f"not in ../shared/reference: {', '.join(missing)}"


def test_a_variable_dropped_from_the_settings_fails_and_is_named() -> None:
    """The check can fail: over a copy of the server's settings without ``instrumentation`` (and with
    nothing else reading it), the seed check names SIE_INSTRUMENTATION and only it."""
    fields = {
        name: (info.annotation, info)
        for name, info in Settings.model_fields.items()
        if name != "instrumentation"
    }
    trimmed = create_model("Trimmed", __base__=SieSettings, **fields)  # type: ignore[call-overload]
    assert "SIE_INSTRUMENTATION" not in looked_up_names()
    with pytest.raises(AssertionError) as failed:
        assert_all_read(SEED_VARIABLES, reads((trimmed, GatewaySettings, ConfigServiceSettings)), "the seeds")
    assert str(failed.value).startswith("the seeds name variables nothing reads: SIE_INSTRUMENTATION\n")


def test_a_family_needs_a_member_and_nested_fields_count() -> None:
    assert unread(["SIE_GATEWAY_K8S_*"], {"SIE_GATEWAY_K8S_NAMESPACE"}) == []
    assert unread(["SIE_GATEWAY_K8S_*"], {"SIE_GATEWAY_KUBERNETES"}) == ["SIE_GATEWAY_K8S_*"]

    class Sub(BaseModel):
        enabled: bool = True

    class Nested(SieSettings):
        model_config = SieSettings.model_config | {"env_nested_delimiter": "__"}
        oom_recovery: Sub = Field(default_factory=Sub)

    assert settings_names([Nested]) == {"SIE_OOM_RECOVERY", "SIE_OOM_RECOVERY__ENABLED"}


def test_the_seed_rule_splits_run_together_rows() -> None:
    text = (
        "SIE_DEVICEautoInference device\nSIE_MAX_LORAS_PER_MODEL10Maximum LoRA\nSIE_POOL_defaultWorker\n"
        "SIE_WORKER_METRICS_PORT9095SIE server\nSIE_ADAPTIVE_TARGET_P50_MS50Queue-mode\n"
        "SIE_MODEL_FILTERNoneComma\nwith the SIE_ prefix\nSIE_GATEWAY_K8S_*) are\nSIE_LOG_JSON=true\n"
    )
    assert seed_names(text) == {
        "SIE_DEVICE",
        "SIE_MAX_LORAS_PER_MODEL",
        "SIE_POOL",
        "SIE_WORKER_METRICS_PORT",
        "SIE_ADAPTIVE_TARGET_P50_MS",
        "SIE_MODEL_FILTER",
        "SIE_GATEWAY_K8S_*",
        "SIE_LOG_JSON",
    }


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seeds (../shared/seeds) are not beside this clone")
def test_the_kept_list_is_what_the_seeds_name() -> None:
    text = "\n".join(path.read_text() for path in sorted(SEEDS.glob("00[0-3]_*.txt")))
    assert len(list(SEEDS.glob("00[0-3]_*.txt"))) == 4
    for raw, name in RUN_TOGETHER.items():
        assert raw in text, f"RUN_TOGETHER's {raw!r} is no longer in the seeds"
        assert seed_name(RUN.match(raw).group()) != name, f"{raw!r} needs no entry"  # type: ignore[union-attr]
    assert seed_names(text) == set(SEED_VARIABLES)
