"""A PUT of a model's config: the whole config replaced by the one sent, the catalogue's way to
converge on its source YAML where the append-only POST answers 409 (a profile changed upstream).

The rules are the public service's, checked against the body alone (a replace drops the old
profiles, so nothing of them can rescue a body): ``profiles`` present, each a mapping under a valid
name with an ``adapter_path`` of its own or up its ``extends`` chain, every adapter module listed by
some bundle (422 otherwise). On top, as for a POST: each ``adapter_path`` a class of the family table
(``catalog.bundles.foreign_adapter``) and the whole config one this release's schema reads, so
nothing is stored that a worker would refuse to parse.

A body equal to the config held is a no-op: no epoch, no delta, ``unchanged: true``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sie.catalog.bundles import adapter_module, foreign_adapter
from sie.catalog.config_errors import invalid
from sie.control.configs import PROFILE_NAME, ConfigRegistry, parse_config, profile_adapter
from sie.control.upstream_names import refuse_undeclared


@dataclass(frozen=True)
class Replacement:
    """What a PUT would do, worked out before anything is written."""

    model_id: str
    config: dict[str, Any]  # the model's config after the write: the body, ``sie_id`` filled in
    changed: bool
    bundles: list[str]  # bundles whose configs change (the model's before and after), by name


def _check_profiles(config: dict[str, Any]) -> set[str]:
    """The adapter paths of a whole config's profiles; raises 422 where one is malformed."""
    profiles = config.get("profiles")
    if not profiles:
        raise invalid("Missing required field: profiles")
    if not isinstance(profiles, dict):
        raise invalid("Field 'profiles' must be a mapping of profile_name -> profile_config")
    paths = set()
    for name, profile in profiles.items():
        if not PROFILE_NAME.fullmatch(str(name)):
            raise invalid(
                f"Profile name '{name}' must match [A-Za-z0-9._-]+ (no '/', ':', whitespace, or other punctuation)"
            )
        if not isinstance(profile, dict):
            raise invalid(f"Profile '{name}' must be a mapping")
        path = profile_adapter(profiles, str(name))
        if path is None:
            raise invalid(f"Profile '{name}' missing adapter_path")
        paths.add(path)
    return paths


def plan_replacement(registry: ConfigRegistry, config: dict[str, Any]) -> Replacement:
    """The outcome of replacing the config of ``config["sie_id"]`` with ``config``; raises
    ``ConfigInvalid`` and changes nothing."""
    model_id = str(config["sie_id"])
    paths = _check_profiles(config)
    unroutable = sorted({adapter_module(p) for p in paths if not registry.bundles_serving([p])})
    if unroutable:
        raise invalid(f"Adapter(s) not in any known bundle: {', '.join(unroutable)}")
    refused = sorted(filter(None, map(foreign_adapter, paths)))
    if refused:
        raise invalid("; ".join(refused))
    profiles = config["profiles"]
    refuse_undeclared(model_id, profiles, profiles, registry.upstream_names, profile_adapter)
    parse_config(config)
    if registry.config(model_id) == config:
        return Replacement(model_id, config, False, [])
    bundles = sorted({*registry.model_bundles(model_id), *registry.bundles_serving(paths)})
    return Replacement(model_id, config, True, bundles)
