"""What the config service knows: the bundles baked into its image, the catalogue it started from
(the models folder) and the models added through the API, and the append-only rules for adding more.

A model config is checked with the server's own schema (``engine.model_config.ModelConfig``): the
config service never accepts a YAML a worker would refuse. A POST may be a whole model or only new
profiles for a known one; the rules are the public service's:

- a profile that exists with other content, or a top-level field that exists with another value, is
  a conflict (409): the API only appends;
- every new profile's adapter must be listed by some bundle, and a write that creates profiles must
  land in at least one bundle (422 otherwise), so nothing is stored that no worker could serve;
- every new profile's ``adapter_path`` must be a class of the family table, never another attribute
  of a listed module nor a ``.py`` file (422, ``catalog.bundles.foreign_adapter``): workers and
  gateways import what it names;
- an identical replay creates nothing (200).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from sie.catalog.bundles import Bundle, adapter_module, bundle_config_hash, foreign_adapter
from sie.catalog.catalog import Catalog
from sie.catalog.config_errors import (
    BundleConflict,
    ConfigInvalid,
    FieldConflict,
    ProfileConflict,
    UnknownModel,
    invalid,
)
from sie.catalog.families import canonical
from sie.catalog.model_config import ModelConfig, load_model_dir
from sie.control.store import file_name_of
from sie.control.upstream_names import refuse_undeclared

PROFILE_NAME: Final = re.compile(r"^[A-Za-z0-9._-]+$")
UNKNOWN_FIELD: Final = "Unknown field: the worker model config schema does not define it."


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return UNKNOWN_FIELD
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _details(exc: ValidationError, keep: Iterable[str] | None = None) -> list[dict[str, Any]]:
    wanted = set(keep) if keep is not None else None
    details = [
        {"loc": [p if isinstance(p, int | str) else str(p) for p in err["loc"]], "message": _message(err)}
        for err in exc.errors()
        if wanted is None or err["type"] in wanted or err["type"].endswith("_type")
    ]
    return sorted(details, key=lambda d: ([str(p) for p in d["loc"]], d["message"]))


def schema_errors(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The fields of a (possibly partial) body the schema refuses: unknown keys and wrong types. A
    missing field is not an error here, since an append carries only what it adds."""
    try:
        ModelConfig.model_validate(body)
    except ValidationError as exc:
        return _details(exc, keep=("extra_forbidden",))
    return []


def dump_yaml(config: dict[str, Any]) -> str:
    """A config's YAML as the service stores and serves it (the public service's dump)."""
    return yaml.safe_dump(config, default_flow_style=False, sort_keys=False, allow_unicode=True)


def parse_config(body: dict[str, Any]) -> ModelConfig:
    try:
        return ModelConfig.model_validate(body)
    except ValidationError as exc:
        raise ConfigInvalid(_details(exc)) from exc


def profile_adapter(profiles: dict[str, Any], name: str) -> str | None:
    """The ``adapter_path`` profile ``name`` runs: its own, else the nearest one up its ``extends``
    chain (None: none, or a chain that loops)."""
    seen: set[str] = set()
    current: Any = name
    while isinstance(current, str) and current and current not in seen:
        seen.add(current)
        profile = profiles.get(current)
        if not isinstance(profile, dict):
            return None
        path = profile.get("adapter_path")
        if isinstance(path, str) and path:
            return path
        current = profile.get("extends")
    return None


@dataclass(frozen=True)
class Plan:
    """What a POST would do, worked out before anything is written."""

    model_id: str
    created: list[str]
    skipped: list[str]
    bundles: list[str]  # the bundles that serve the model after the write, best first
    merged: dict[str, Any]  # the model's whole config after the write


class ConfigRegistry:
    def __init__(self, bundles: list[Bundle], models_dir: Path | None) -> None:
        self.bundles = sorted(bundles, key=lambda b: (b.priority, b.name))
        self.models_dir = models_dir
        self._configs: dict[str, dict[str, Any]] = {}  # by sie_id, as written (the merged YAML's dict)
        self._parsed: dict[str, ModelConfig] = {}
        self._texts: dict[str, str] = {}  # the baseline's own YAML text, served as written
        self.api_ids: set[str] = set()
        # By sie_id: the text the store holds, as this registry read or wrote it.
        self._stored: dict[str, str] = {}
        # By sie_id: the models dir's text and config, which a DELETE of the API's copy reveals again.
        self._baseline: dict[str, tuple[str, ModelConfig]] = {}
        if models_dir is not None and models_dir.is_dir():
            for path, config in load_model_dir(models_dir):
                self._baseline[config.sie_id] = (path.read_text(encoding="utf-8"), config)
                self._reveal(config.sie_id)
        self._catalog: Catalog | None = None
        self.upstream_names: frozenset[str] | None = None  # SIE_UPSTREAM_NAMES (``upstream_names``)

    # -- reading -------------------------------------------------------------------------------
    def ids(self) -> list[str]:
        return sorted(self._configs)

    def config(self, model_id: str) -> dict[str, Any] | None:
        return self._configs.get(model_id)

    def baseline_text(self, model_id: str) -> str | None:
        return self._texts.get(model_id)

    def lookup(self, model: str) -> str | None:
        """The sie_id a name (or a ``sie_id:profile`` variant) refers to, case-insensitively."""
        lowered = {sie_id.lower(): sie_id for sie_id in self._configs}
        found = lowered.get(model.lower())
        if found is not None:
            return found
        base, sep, profile = model.rpartition(":")
        found = lowered.get(base.lower()) if sep else None
        if found is not None and profile in (self._configs[found].get("profiles") or {}):
            return found
        return None

    def bundles_serving(self, adapter_paths: Iterable[str]) -> list[str]:
        paths = list(adapter_paths)
        return [
            b.name for b in self.bundles if any(b.lists(path) or b.lists(canonical(path)) for path in paths)
        ]

    def model_bundles(self, model_id: str, profiles: Iterable[str] | None = None) -> list[str]:
        config = self._configs.get(model_id) or {}
        all_profiles = config.get("profiles") or {}
        names = list(all_profiles) if profiles is None else list(profiles)
        return self.bundles_serving(p for name in names if (p := profile_adapter(all_profiles, name)))

    def forget_stored(self, model_id: str) -> None:
        """The store no longer holds ``model_id`` (removed by hand): its next write creates the file."""
        self._stored.pop(model_id, None)

    def stored_text(self, model_id: str) -> str | None:
        """What the store holds of ``model_id`` as far as this registry knows (None: nothing): the
        condition of the next write of it (``ConfigStore.write_model``)."""
        return self._stored.get(model_id)

    def bundle(self, name: str) -> Bundle | None:
        return next((b for b in self.bundles if b.name == name), None)

    def catalog(self) -> Catalog:
        """Every model as the server would serve it (relative weight paths against the models dir)."""
        if self._catalog is None:
            folder = self.models_dir or Path.cwd()
            self._catalog = Catalog.from_configs((c, folder) for c in self._parsed.values())
        return self._catalog

    def bundle_config_hash(self, bundle: Bundle) -> str:
        return bundle_config_hash(self.catalog(), bundle)

    def bundles_hash(self) -> str:
        """The public ``bundles_hash``: followers refetch the bundles when it changes."""
        if not self.bundles:
            return ""
        canonical_list = [
            {"name": b.name, "priority": b.priority, "adapters": sorted(b.adapters), "engine": b.engine}
            for b in sorted(self.bundles, key=lambda b: b.name)
        ]
        payload = json.dumps(canonical_list, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def resolve(self, model: str, bundle: str | None) -> tuple[str, list[str]]:
        found = self.lookup(model)
        compatible = self.model_bundles(found) if found else []
        if not found or not compatible:
            raise UnknownModel(model)
        if bundle is not None:
            if bundle not in compatible:
                raise BundleConflict(model, bundle, compatible)
            return bundle, compatible
        return compatible[0], compatible

    def serving_ids(self) -> list[tuple[str, str, list[str]]]:
        """What a client can name, as the public service lists it: each routable model id with its
        profiles, and each non-default profile as its own ``id:profile`` with that profile alone."""
        listed = []
        for model_id in self.ids():
            profiles = sorted(self._configs[model_id].get("profiles") or {})
            if not self.model_bundles(model_id):
                continue
            listed.append((model_id, model_id, profiles))
            listed += [
                (f"{model_id}:{p}", model_id, [p])
                for p in profiles
                if p != "default" and self.model_bundles(model_id, [p])
            ]
        return sorted(listed)

    # -- writing -------------------------------------------------------------------------------
    def plan(self, body: dict[str, Any]) -> Plan:
        """The outcome of adding ``body``; raises ``ConfigInvalid`` / ``ProfileConflict`` /
        ``FieldConflict`` and changes nothing."""
        model_id = body.get("sie_id")
        if not model_id:
            raise invalid("Missing required field: sie_id")
        profiles = body.get("profiles")
        if not profiles:
            raise invalid("Missing required field: profiles")
        if not isinstance(profiles, dict):
            raise invalid("Field 'profiles' must be a mapping of profile_name -> profile_config")
        for name, profile in profiles.items():
            if not PROFILE_NAME.fullmatch(str(name)):
                raise invalid(
                    f"Profile name '{name}' must match [A-Za-z0-9._-]+ "
                    "(no '/', ':', whitespace, or other punctuation)"
                )
            if not isinstance(profile, dict):
                raise invalid(f"Profile '{name}' must be a mapping")
        stored = self._configs.get(model_id) or {}
        stored_profiles: dict[str, Any] = dict(stored.get("profiles") or {})
        together = {**stored_profiles, **profiles}
        for name, profile in profiles.items():
            if not profile_adapter(together, name) and not profile.get("extends"):
                raise invalid(f"Profile '{name}' missing adapter_path")
        new_paths = {p for name in profiles if (p := profile_adapter(together, name))}
        unroutable = sorted({adapter_module(p) for p in new_paths if not self.bundles_serving([p])})
        if unroutable:
            raise invalid(f"Adapter(s) not in any known bundle: {', '.join(unroutable)}")
        refused = sorted(filter(None, map(foreign_adapter, new_paths)))
        if refused:
            raise invalid("; ".join(refused))
        refuse_undeclared(model_id, together, profiles, self.upstream_names, profile_adapter)
        created = [name for name in profiles if name not in stored_profiles]
        clashing = [n for n in profiles if n in stored_profiles and stored_profiles[n] != profiles[n]]
        if clashing:
            raise ProfileConflict(model_id, clashing)
        skipped = [name for name in profiles if name in stored_profiles]
        fields = sorted(k for k, v in body.items() if k != "profiles" and k in stored and stored[k] != v)
        if fields:
            raise FieldConflict(model_id, fields)
        merged = dict(stored) if stored else dict(body)  # the stored order first, new fields after
        for key, value in body.items():
            merged.setdefault(key, value)
        merged["profiles"] = {**stored_profiles, **{n: profiles[n] for n in created}}
        if created:
            parse_config(merged)
        all_paths = [p for name in merged["profiles"] if (p := profile_adapter(merged["profiles"], name))]
        bundles = self.bundles_serving(all_paths)
        if created and not bundles:
            raise invalid(
                f"Model '{model_id}' does not resolve to any known bundle. Every new model must contribute "
                "at least one profile whose `adapter_path` module appears in a bundle's adapters list. "
                "(Profiles that only `extends` another profile do not count.)"
            )
        return Plan(model_id, created, skipped, bundles, merged)

    def commit(self, merged: dict[str, Any], stored: str | None = None) -> None:
        """``merged`` becomes the model's config, added through the API; ``stored`` is its text in the
        store (None without a store)."""
        model_id = merged["sie_id"]
        self._parsed[model_id] = parse_config(merged)
        self._configs[model_id] = merged
        self._texts.pop(model_id, None)
        self.api_ids.add(model_id)
        if stored is not None:
            self._stored[model_id] = stored
        self._catalog = None

    def _reveal(self, model_id: str) -> None:
        text, parsed = self._baseline[model_id]
        self._texts[model_id] = text
        self._configs[model_id] = yaml.safe_load(text)  # a fresh copy: a write never shares it
        self._parsed[model_id] = parsed

    def has_baseline(self, model_id: str) -> bool:
        return model_id in self._baseline

    def remove(self, model_id: str) -> list[str]:
        """The API's config of ``model_id`` is gone: the models dir's comes back, or the model goes.
        Returns the bundles whose configs changed (those it was in and those it is in now), by name."""
        before = self.model_bundles(model_id)
        self.api_ids.discard(model_id)
        self._stored.pop(model_id, None)
        if model_id in self._baseline:
            self._reveal(model_id)
        else:
            for held in (self._configs, self._parsed, self._texts):
                held.pop(model_id, None)
        self._catalog = None
        return sorted({*before, *self.model_bundles(model_id)})

    def restore(self, texts: dict[str, str]) -> list[str]:
        """Put the store's models back (``texts`` by the id each file name maps to); returns the ids
        that did not parse (kept out). A config is taken under the ``sie_id`` it names when that id's
        file name is the file's: an older release stored ``a_/b`` as ``a___b.yaml``, which maps to
        ``a/_b``."""
        bad = []
        for model_id, text in sorted(texts.items()):
            try:
                merged = yaml.safe_load(text)
                sie_id = merged.get("sie_id") if isinstance(merged, dict) else None
                if not isinstance(sie_id, str) or file_name_of(sie_id) != file_name_of(model_id):
                    raise ValueError("not a model config for this id")
                self.commit(merged, stored=text)
            except (ValueError, yaml.YAMLError, ConfigInvalid):
                bad.append(model_id)
        return bad
