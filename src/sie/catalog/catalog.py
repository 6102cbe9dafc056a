"""The servable model ids: one per YAML ``sie_id`` plus one ``{sie_id}:{profile}`` per extra profile."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sie.catalog.model_config import ModelConfig, ModelConfigError, ResolvedProfile, load_model_dir


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    config: ModelConfig
    profile: ResolvedProfile
    config_dir: Path

    @property
    def max_sequence_length(self) -> int | None:
        """The profile's ``loadtime.max_seq_length`` when it sets one (the public server's variants
        are shorter than their model this way), else the model's."""
        length = self.profile.loadtime.get("max_seq_length")
        return length if isinstance(length, int) and length > 0 else self.config.max_sequence_length


class Catalog:
    def __init__(self, entries: list[CatalogEntry]) -> None:
        self._entries = {e.name: e for e in entries}

    @classmethod
    def from_configs(cls, configs: Iterable[tuple[ModelConfig, Path]]) -> Catalog:
        """One entry per profile of each ``(config, folder it was read from)``."""
        entries: list[CatalogEntry] = []
        for config, folder in configs:
            for profile_name in config.profiles:
                name = config.sie_id if profile_name == "default" else f"{config.sie_id}:{profile_name}"
                entries.append(CatalogEntry(name, config, config.resolve_profile(profile_name), folder))
        return cls(entries)

    @classmethod
    def from_directory(cls, directory: Path, only: list[str] | None = None) -> Catalog:
        """``only`` is the ``--models`` filter: ids outside the directory are a startup error."""
        catalog = cls.from_configs((config, path.parent) for path, config in load_model_dir(directory))
        if only:
            unknown = [m for m in only if m not in catalog._entries]
            if unknown:
                raise ModelConfigError(f"--models names unknown model(s): {', '.join(unknown)}")
            keep = set(only)
            catalog._entries = {
                n: e for n, e in catalog._entries.items() if n in keep or e.config.sie_id in keep
            }
        return catalog

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> CatalogEntry | None:
        return self._entries.get(name)

    def __getitem__(self, name: str) -> CatalogEntry:
        return self._entries[name]

    def entries(self) -> list[CatalogEntry]:
        return list(self._entries.values())

    def names(self) -> list[str]:
        return list(self._entries)

    def configs(self) -> dict[str, tuple[ModelConfig, Path]]:
        """Each model's config (by ``sie_id``) and the folder its relative paths resolve against."""
        return {e.config.sie_id: (e.config, e.config_dir) for e in self._entries.values()}

    def overlaid(self, configs: Iterable[tuple[ModelConfig, Path]]) -> Catalog:
        """This catalogue with ``configs`` added, each replacing every profile of a model it names:
        the config service's copy of a model wins over the one baked into the image."""
        merged = self.configs()
        for config, folder in configs:
            merged[config.sie_id] = (config, folder)
        return Catalog.from_configs(merged.values())

    def for_profile(self, name: str, profile: str | None) -> str:
        """The model id that serves ``options.profile`` (a variant id), or ``name`` itself."""
        if not profile or profile == "default":
            return name
        entry = self._entries[name]
        if entry.profile.name == profile:
            return name
        return f"{entry.config.sie_id}:{profile}"
