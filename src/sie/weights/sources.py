"""Where a model's files come from: the tiers tried in order until one has them.

1. ``weights_path`` in the YAML (a local folder, relative paths against the YAML's folder);
2. weights that ship inside an installed Python package: they need no disk, no network, no cache;
3. the local cache (``SIE_LOCAL_CACHE``, else ``$HF_HOME/hub``), in the Hugging Face hub-cache layout;
4. the cluster cache (``SIE_CLUSTER_CACHE``: ``s3://``, ``gs://`` or a folder, same layout), copied
   into the local cache on a hit and served from there;
5. the Hugging Face Hub, only when ``hf_fallback`` is on, downloaded into the local cache.

Copies and downloads fetch only the files an adapter reads (``weight_files``), are refused when those
are over ``max_fetch_bytes`` (``TooLarge``: the LoRAs' cap), make room first on a full disk
(``disk_cache``) and log their progress. Nothing here loads a model: it answers with a folder
or raises ``WeightsNotFound`` (no tier has it: permanent) or ``WeightsUnavailable`` (a tier that might
have it could not be reached: may heal); see ``weight_errors``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from sie.weights.cluster_cache import ClusterCache, ClusterUnreachable
from sie.weights.disk_cache import DiskCache, folder_name, nothing_in_use
from sie.weights.errors import TooLarge, WeightsNotFound, WeightsUnavailable
from sie.weights.files import needed_files
from sie.weights.hub_download import HubMiss, HubUnreachable, download
from sie.weights.packaged import INSTALL_COMMAND, PACKAGED

__all__ = ["WeightSources", "WeightsNotFound", "WeightsUnavailable"]


@dataclass(frozen=True)
class WeightSources:
    """The configured tiers; built once from settings and handed to the loader.

    ``in_use`` names the hub ids the disk cache must never evict (the models loaded now); the
    composition root passes the engine's view of it. ``max_fetch_bytes`` refuses a copy or download
    whose files are larger (None: any size); ``hub_setting`` is the setting a log line names when the
    Hub is off."""

    local_cache: Path | None = None
    hf_fallback: bool = True
    cluster_cache: str | None = None
    disk_cache_enabled: bool = True
    disk_pressure_threshold_percent: float = 85.0
    in_use: Callable[[], Collection[str]] = field(default=nothing_in_use, compare=False)
    max_fetch_bytes: int | None = None
    hub_setting: str = "hf_fallback"

    def cache_root(self) -> Path:
        if self.local_cache is not None:
            return self.local_cache
        hf_home = os.environ.get("HF_HOME")
        return Path(hf_home) / "hub" if hf_home else Path.home() / ".cache" / "huggingface" / "hub"

    def disk_cache(self) -> DiskCache:
        return DiskCache(
            self.cache_root(), self.disk_cache_enabled, self.disk_pressure_threshold_percent, self.in_use
        )

    def resolve(
        self,
        hf_id: str | None,
        weights_path: str | None,
        config_dir: Path | None = None,
        revision: str | None = None,
        *,
        onnx: bool = False,
    ) -> Path:
        """The first tier holding the files; a miss names every place looked at, in order, and why
        each failed, because the operator's fix differs per tier (copy a folder, install a package,
        fix the bucket, allow the download). ``onnx``: the adapter runs an ONNX graph, so copies and
        downloads keep ``*.onnx`` files (they skip them otherwise)."""
        tried: list[str] = []
        unreachable = False
        if weights_path:
            folder = Path(weights_path).expanduser()
            if not folder.is_absolute() and config_dir is not None:
                folder = config_dir / folder
            if folder.exists():
                return folder
            tried.append(f"weights_path {folder} (absent)")
        if hf_id:
            packaged = PACKAGED.get(hf_id)
            if packaged is None:
                tried.append("packages (none ships this model)")
            else:
                located = packaged.locate()
                if located is not None:
                    return located
                tried.append(f"package '{packaged.module}' (not installed: {INSTALL_COMMAND} {hf_id})")
            cached = self.cached(hf_id, revision)
            if cached is not None:
                self.disk_cache().touch(hf_id)
                return cached
            tried.append(f"local cache {self._snapshots(hf_id)} (no snapshot)")
            if self.cluster_cache:
                copied, unreachable = self._from_cluster(hf_id, revision, onnx, tried)
                if copied is not None:
                    return copied
            else:
                tried.append("cluster cache (not configured: SIE_CLUSTER_CACHE is unset)")
            if self.hf_fallback:
                try:
                    folder = download(hf_id, revision, self.disk_cache(), onnx, self._before_fetch(hf_id))
                except TooLarge as exc:
                    tried.append(f"hub download of {hf_id!r} (refused: {exc})")
                except HubMiss as exc:
                    tried.append(f"hub download of {hf_id!r} ({exc})")
                except HubUnreachable as exc:
                    tried.append(f"hub download of {hf_id!r} (unreachable: {exc})")
                    unreachable = True
                else:
                    self.disk_cache().touch(hf_id)
                    return folder
            else:
                tried.append(f"hub download of {hf_id!r} (disabled: {self.hub_setting} is off)")
        message = f"no weights for {hf_id or weights_path!r}; tried: {'; '.join(tried)}"
        if unreachable:
            raise WeightsUnavailable(message)
        packaged = PACKAGED.get(hf_id) if hf_id else None
        raise WeightsNotFound(message, f"{INSTALL_COMMAND} {hf_id}" if packaged is not None else None)

    def _before_fetch(self, hf_id: str) -> Callable[[int], object]:
        """What runs once a fetch knows its size: the cap, then room on the disk."""

        def check(needed: int) -> object:
            cap = self.max_fetch_bytes
            if cap is not None and needed > cap:
                raise TooLarge(f"{needed} bytes, over the cap of {cap} bytes")
            return self.disk_cache().require_room(hf_id, needed)

        return check

    def _from_cluster(
        self, hf_id: str, revision: str | None, onnx: bool, tried: list[str]
    ) -> tuple[Path | None, bool]:
        """(the local copy or None, whether the store was unreachable)."""
        assert self.cluster_cache is not None
        cluster = ClusterCache(self.cluster_cache)
        where = f"cluster cache {cluster.model_url(hf_id)}/snapshots"
        try:
            snapshot = cluster.find(hf_id, revision)
            if snapshot is None:
                tried.append(f"{where} (no snapshot)")
                return None, False
            needed = needed_files(snapshot.sizes, onnx)
            self._before_fetch(hf_id)(sum(snapshot.sizes[name] for name in needed))
            copied = cluster.copy(snapshot, self.disk_cache(), onnx)
        except TooLarge as exc:
            tried.append(f"{where} (refused: {exc})")
            return None, False
        except ClusterUnreachable as exc:
            tried.append(f"{where} (unreachable: {exc})")
            return None, True
        self.disk_cache().touch(hf_id)
        return copied, False

    def _snapshots(self, hf_id: str) -> Path:
        return self.cache_root() / folder_name(hf_id) / "snapshots"

    def cached(self, hf_id: str, revision: str | None = None) -> Path | None:
        """The local cache's snapshot of ``hf_id`` (the newest, or the pinned ``revision``), else None."""
        snapshots = self._snapshots(hf_id)
        if not snapshots.is_dir():
            return None
        if revision:  # a pinned revision: that snapshot (by commit or by ref) or a miss, never another
            ref = snapshots.parent / "refs" / revision
            commit = ref.read_text().strip() if ref.is_file() else revision
            return snapshots / commit if commit and (snapshots / commit).is_dir() else None
        # Dot folders are copies still in progress (``cluster_cache``).
        candidates = [p for p in snapshots.iterdir() if p.is_dir() and not p.name.startswith(".")]
        candidates.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        return candidates[0] if candidates else None
