"""Bundles: named sets of adapter modules, and the models of a catalogue that a bundle serves.

A bundle file (``bundles/<name>.yaml``, the public server's format) names the adapter *modules* an
image can run (``adapters``), with a ``priority``, an optional ``default: true`` and the pip ``deps``
they need. A model id (``sie_id`` for the default profile, ``sie_id:profile`` for each other profile)
belongs to a bundle when the module of that profile's ``adapter_path`` is listed, or when the class it
resolves to here (a public name is an alias of one of ours, ``adapters.registry``) lives in a listed
module: so a bundle written with the public module names selects our YAMLs too, and ours select public
YAMLs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sie.catalog.catalog import Catalog, CatalogEntry
from sie.catalog.families import CANONICAL, canonical, not_served
from sie.catalog.model_config import ModelConfig

DEFAULT_BUNDLE: Final = "default"
# The runtime a bundle's image speaks (the public ``engine`` field): the Python adapters unless a
# bundle says otherwise (the public ``candle`` bundle names the Rust runtime, which no image here runs).
DEFAULT_ENGINE: Final = "pytorch"


class BundleError(ValueError):
    """An unknown bundle name or an unreadable bundle file."""


class _BundleFile(BaseModel):
    """What we read of a bundle file; other keys (``platform``...) are the image builder's business
    and are kept out of the way, not refused."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    priority: int = 50
    default: bool = False
    engine: str = DEFAULT_ENGINE
    adapters: list[str] = Field(default_factory=list)
    deps: dict[str, Any] = Field(default_factory=dict)


def adapter_module(adapter_path: str) -> str:
    return adapter_path.split(":", 1)[0]


def foreign_adapter(adapter_path: str) -> str | None:
    """Why a config that came from outside this process (sie-config's API, its export) may not name
    ``adapter_path``; None when it may. The loader imports the module a path names and calls ``load``
    on the attribute after the colon, so only the family table's classes (ours, the public names of
    ours, and the families this release refuses unloaded) are allowed from there: not another
    attribute of a listed module (``sie.adapters.dense_torch:torch``), never a ``.py`` file. A
    custom adapter stays possible in a model folder the operator ships with the process."""
    if adapter_module(adapter_path).endswith(".py"):
        return (
            f"adapter_path '{adapter_path}' names a Python file: only a model folder shipped with the "
            "server may, never a config sent over the network"
        )
    if canonical(adapter_path) in CANONICAL or not_served(adapter_path) is not None:
        return None
    return (
        f"adapter_path '{adapter_path}' is not a class of the family table (sie.catalog.families): "
        "name one of the adapter classes this release runs, e.g. "
        "'sie.adapters.dense_torch:TorchDenseEncoder'"
    )


@dataclass(frozen=True)
class Bundle:
    name: str
    adapters: frozenset[str]
    priority: int = 50
    default: bool = False
    deps: dict[str, Any] = field(default_factory=dict)
    engine: str = DEFAULT_ENGINE

    def lists(self, adapter_path: str) -> bool:
        """Whether this bundle names the module of ``adapter_path`` as written (the public
        server's test, used for ``bundle_config_hash``)."""
        return adapter_module(adapter_path) in self.adapters

    def serves(self, entry: CatalogEntry) -> bool:
        path = entry.profile.adapter_path
        return self.lists(path) or self.lists(canonical(path))

    def select(self, catalog: Catalog) -> Catalog:
        entries = [catalog.get(name) for name in catalog.names()]
        return Catalog([entry for entry in entries if entry is not None and self.serves(entry)])


def parse_model_spec(spec: str) -> tuple[str | None, str]:
    """``[bundle:/]org/model[:profile]`` → (bundle or None, model)."""
    if not spec or not spec.strip():
        raise ValueError("model_spec must not be empty")
    if ":/" not in spec:
        return None, spec
    bundle, model = spec.split(":/", 1)
    if not bundle:
        raise ValueError("Bundle part of model_spec must not be empty")
    if not model:
        raise ValueError("Model part of model_spec must not be empty")
    return bundle.lower(), model


def bundle_names(directory: Path) -> list[str]:
    return sorted(path.stem for path in directory.glob("*.yaml"))


def load_bundle(name: str, directory: Path) -> Bundle:
    path = directory / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(bundle_names(directory)) or "none"
        raise BundleError(f"Bundle '{name}' not found in {directory} (bundles: {known})")
    try:
        parsed = _BundleFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    except (yaml.YAMLError, ValidationError) as exc:
        raise BundleError(f"{path}: {exc}") from exc
    return Bundle(
        parsed.name,
        frozenset(a for a in parsed.adapters if a),
        parsed.priority,
        parsed.default,
        dict(parsed.deps),
        parsed.engine,
    )


def bundle_config_hash(catalog: Catalog, bundle: Bundle) -> str:
    """The public ``bundle_config_hash``: SHA-256 of the compact, key-sorted JSON list
    ``[{"sie_id", "revision", "profiles": [{"name", "config"}]}]`` over the served models with a
    profile whose adapter module the bundle lists (as written, not through aliases), each such
    profile resolved to ``adapter_path``, ``max_batch_tokens``, ``compute_precision`` and
    ``adapter_options`` (``{"loadtime", "runtime"}`` with empty halves left out, null when both are
    empty). Empty string when no model is in scope. A gateway computes the same bytes from the same
    YAMLs, which is what lets it trust that this worker runs the configs it knows."""
    configs: dict[str, ModelConfig] = {}
    for name in catalog.names():
        entry = catalog.get(name)
        if entry is not None:
            configs.setdefault(entry.config.sie_id, entry.config)
    items = []
    for sie_id in sorted(configs):
        config = configs[sie_id]
        profiles = []
        for profile_name in sorted(config.profiles):
            resolved = config.resolve_profile(profile_name)
            if not bundle.lists(resolved.adapter_path):
                continue
            options = {k: v for k, v in (("loadtime", resolved.loadtime), ("runtime", resolved.runtime)) if v}
            profiles.append(
                {
                    "name": profile_name,
                    "config": {
                        "adapter_path": resolved.adapter_path,
                        "max_batch_tokens": resolved.max_batch_tokens,
                        "compute_precision": resolved.compute_precision.value
                        if resolved.compute_precision
                        else None,
                        "adapter_options": options or None,
                    },
                }
            )
        if profiles:
            items.append({"sie_id": sie_id, "revision": config.hf_revision, "profiles": profiles})
    if not items:
        return ""
    serialized = json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(serialized.encode("utf-8")).hexdigest()


class CatalogHash:
    """``bundle_config_hash`` of the catalogue being served, recomputed only when hot reload swaps it."""

    def __init__(self, bundle: Bundle | None) -> None:
        self._bundle = bundle
        self._catalog: Catalog | None = None
        self._hash = ""

    def __call__(self, catalog: Catalog) -> str:
        if self._bundle is None:
            return ""
        if catalog is not self._catalog:
            self._catalog, self._hash = catalog, bundle_config_hash(catalog, self._bundle)
        return self._hash
