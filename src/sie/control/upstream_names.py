"""``SIE_UPSTREAM_NAMES``: the upstreams the servers' upstreams files define, as the operator tells
sie-config (comma-separated). With it set, a written remote profile that names any other upstream is
refused 422, as the public service refuses it, so a config no server could serve is never stored;
unset, the names are unknown here and not checked (a server refuses such a profile per request).

Only the profiles a write sends are checked; ``extends`` resolves against the model's profiles after
the write, as the server resolves it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sie.catalog.config_errors import ConfigInvalid
from sie.catalog.model_config import is_remote_adapter

# ``configs.profile_adapter``: the adapter path a profile runs, up its ``extends`` chain.
AdapterOf = Callable[[dict[str, Any], str], "str | None"]


def _loadtime(profiles: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The profile's own non-empty ``adapter_options.loadtime``, else its parent's (one level, as
    ``ModelConfig.resolve_profile``)."""
    for current in (name, (profiles.get(name) or {}).get("extends")):
        profile = profiles.get(current) if isinstance(current, str) else None
        options = profile.get("adapter_options") if isinstance(profile, dict) else None
        loadtime = options.get("loadtime") if isinstance(options, dict) else None
        if isinstance(loadtime, dict) and loadtime:
            return loadtime
    return {}


def undeclared(
    profiles: dict[str, Any], written: Iterable[str], declared: frozenset[str], adapter_of: AdapterOf
) -> dict[str, object]:
    """Each written remote profile whose upstream is not ``declared``, with the upstream it names."""
    found: dict[str, object] = {}
    for name in written:
        if not is_remote_adapter(adapter_of(profiles, name)):
            continue
        upstream = _loadtime(profiles, name).get("upstream")
        if not isinstance(upstream, str) or upstream not in declared:
            found[name] = upstream
    return found


def refuse_undeclared(
    model_id: str,
    profiles: dict[str, Any],
    written: Iterable[str],
    declared: frozenset[str] | None,
    adapter_of: AdapterOf,
) -> None:
    """422 ``validation_error`` naming every written profile on an undeclared upstream."""
    if declared is None:
        return
    missing = undeclared(profiles, written, declared, adapter_of)
    if missing:
        raise ConfigInvalid(
            [
                {"message": f"Profile '{name}' of '{model_id}' names an undefined upstream {upstream!r}"}
                for name, upstream in missing.items()
            ]
        )
