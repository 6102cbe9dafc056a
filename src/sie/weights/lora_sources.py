"""Where a LoRA's files come from: the operator's choices only, never a path a request sends.

A request's ``options.lora_id`` names either a LoRA one of its model's profiles declares (their
``lora_id``, the public field: a Hub id, or a folder relative to the YAML), or the name of a folder in
the operator's LoRA root (``SIE_LORA_ROOT``): one path component (``LORA_NAME``), so no ``/``, no
``..``, no ``~`` and nothing absolute can reach the filesystem. The catalogue refuses anything else
before a model is touched (``catalog.options.check_lora``), and the engine checks again before a load.

A declared Hub id is looked for in the models' local cache (read only: an operator's own fetch), then
in the LoRA cache (``SIE_LORA_CACHE``), then copied from the cluster cache or, only when
``SIE_LORA_HF_FALLBACK`` is on, downloaded from the Hub, both into the LoRA cache and both refused over
``SIE_LORA_MAX_BYTES``. The LoRA cache is outside the models' disk LRU: a LoRA fetch never evicts a
model's weights, and the models' LRU never sees it (it considers ``models--*`` folders of its own root
only).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Final

from sie.weights.sources import WeightSources

LORA_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
DEFAULT_MAX_BYTES: Final = 512 * 1024 * 1024
LORA_CACHE_FOLDER: Final = "sie-loras"  # in the models' cache root, beside (not among) its models--*
NAMES_SHOWN: Final = 20  # root names an error lists
_NAMES_READ: Final = 1000  # root entries read to find them: a huge folder costs a bounded scan


def is_name(lora_id: str) -> bool:
    """One folder name: what a request may ask of the LoRA root."""
    return LORA_NAME.fullmatch(lora_id) is not None


def is_path(value: str) -> bool:
    """A declared ``lora_id`` that is a folder (absolute, ``~``, or relative to the model's YAML)."""
    return value.startswith(("/", "./", "../", "~"))


@dataclass(frozen=True)
class LoraSettings:
    root: Path | None = None  # SIE_LORA_ROOT
    hf_fallback: bool = False  # SIE_LORA_HF_FALLBACK
    max_bytes: int = DEFAULT_MAX_BYTES  # SIE_LORA_MAX_BYTES
    cache: Path | None = None  # SIE_LORA_CACHE; None: LORA_CACHE_FOLDER in the models' cache root


@dataclass(frozen=True)
class LoraSources:
    models: WeightSources
    settings: LoraSettings = field(default_factory=LoraSettings)

    def cache_root(self) -> Path:
        return self.settings.cache or self.models.cache_root() / LORA_CACHE_FOLDER

    def under_root(self, name: str) -> Path | None:
        """The root's folder called ``name``, or None (no root, not a name, no such folder)."""
        root = self.settings.root
        if root is None or not is_name(name):
            return None
        folder = root / name
        return folder if folder.is_dir() else None

    def root_names(self) -> list[str]:
        """Some names a request may use (an error lists them): at most ``NAMES_SHOWN``, sorted."""
        root = self.settings.root
        if root is None:
            return []
        try:
            with os.scandir(root) as entries:
                names = [e.name for e in islice(entries, _NAMES_READ) if is_name(e.name) and e.is_dir()]
        except OSError:
            return []
        return sorted(names)[:NAMES_SHOWN]

    def declared(self, lora_id: str, config_dir: Path | None) -> Path:
        """The folder of a LoRA a profile declares; ``WeightsNotFound``/``WeightsUnavailable`` name
        every place looked at (for the log)."""
        if is_path(lora_id):
            return self.models.resolve(None, lora_id, config_dir)  # the operator's folder: no fetch
        cached = self.models.cached(lora_id)
        if cached is not None:
            return cached
        fetching = WeightSources(
            local_cache=self.cache_root(),
            hf_fallback=self.settings.hf_fallback,
            cluster_cache=self.models.cluster_cache,
            disk_cache_enabled=False,
            max_fetch_bytes=self.settings.max_bytes,
            hub_setting="SIE_LORA_HF_FALLBACK",
        )
        return fetching.resolve(lora_id, lora_id, config_dir)
