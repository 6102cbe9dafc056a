"""The cluster cache: a bucket (or shared folder) in the Hugging Face hub-cache layout that many
servers read, so a model is downloaded from the Hub once per cluster instead of once per node.

Layout, as ``huggingface-cli download`` leaves a cache and ``aws s3 sync ~/.cache/huggingface/hub
s3://bucket/hub`` uploads it (symlinks become plain files)::

    <location>/models--org--name/refs/main              # optional: the commit "main" points at
    <location>/models--org--name/snapshots/<commit>/... # the files

A snapshot is chosen as: the YAML's ``hf_revision`` (a commit, or a ref under ``refs/``), else the
commit ``refs/main`` names, else the last snapshot in name order. It is copied into the local cache
under the same names, through a temporary folder renamed into place once complete, so a copy that
breaks off never looks like a snapshot; the temporary folder is removed when it does. A copy that runs
out of room on the local disk is ``DiskFull`` (the disk's fault, not the store's).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from fsspec import AbstractFileSystem

from sie.weights.disk_cache import DiskCache, folder_name
from sie.weights.errors import out_of_space
from sie.weights.files import needed_files
from sie.weights.progress import report_progress
from sie.weights.remote_fs import filesystem

log = logging.getLogger(__name__)


class ClusterUnreachable(Exception):
    """The store could not be listed or read; ``str()`` is a one-line reason for the miss message."""


@dataclass(frozen=True)
class ClusterSnapshot:
    hf_id: str
    revision: str
    path: str  # the snapshot folder inside the filesystem
    sizes: dict[str, int]  # file path relative to the snapshot -> bytes
    from_ref: str | None  # "main" when refs/main chose it


def _reason(exc: BaseException) -> str:
    first_line = next(iter(str(exc).strip().splitlines()), "")[:160]
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


class ClusterCache:
    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/")
        self._fs: tuple[AbstractFileSystem, str] | None = None

    def _filesystem(self) -> tuple[AbstractFileSystem, str]:
        if self._fs is None:
            self._fs = filesystem(self.location)
        return self._fs

    def model_url(self, hf_id: str) -> str:
        return f"{self.location}/{folder_name(hf_id)}"

    def find(self, hf_id: str, revision: str | None) -> ClusterSnapshot | None:
        """The snapshot to copy, or None when the store has none; ``ClusterUnreachable`` when the
        store could not be asked. ImportError (gcsfs missing) passes through: a setup fault."""
        fs, root = self._filesystem()
        model = f"{root}/{folder_name(hf_id)}"
        try:
            fs.invalidate_cache(model)
            try:
                names = sorted(
                    p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(f"{model}/snapshots", detail=False)
                )
            except FileNotFoundError:
                return None
            if not names:
                return None
            chosen, from_ref = self._choose(fs, model, names, revision)
            if chosen is None:
                return None
            path = f"{model}/snapshots/{chosen}"
            found = fs.find(path, detail=True)
        except ImportError:
            raise
        except Exception as exc:  # s3fs/gcsfs/botocore raise many types; all mean "could not ask"
            raise ClusterUnreachable(_reason(exc)) from exc
        sizes = {
            name[len(path) + 1 :]: int(info.get("size") or 0)
            for name, info in found.items()
            if info.get("type") != "directory"
        }
        return ClusterSnapshot(hf_id, chosen, path, sizes, from_ref) if sizes else None

    @staticmethod
    def _choose(
        fs: AbstractFileSystem, model: str, names: list[str], revision: str | None
    ) -> tuple[str | None, str | None]:
        wanted = revision or "main"
        if wanted in names:
            return wanted, None
        try:
            commit = fs.cat_file(f"{model}/refs/{wanted}").decode().strip()
        except FileNotFoundError:
            commit = ""
        if commit in names:
            return commit, wanted
        return (None, None) if revision else (names[-1], None)

    def copy(self, snapshot: ClusterSnapshot, local: DiskCache, onnx: bool) -> Path:
        """Copy the files an adapter of this kind needs into the ``local`` cache's hub layout; the
        local snapshot folder. ``ClusterUnreachable`` when the copy breaks off, ``DiskFull`` when the
        local disk ran out of room; either way nothing of it is left behind."""
        fs, _ = self._filesystem()
        files = needed_files(snapshot.sizes, onnx)
        model_dir = local.root / folder_name(snapshot.hf_id)
        final = model_dir / "snapshots" / snapshot.revision
        partial = model_dir / "snapshots" / f".{snapshot.revision}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        total = sum(snapshot.sizes[name] for name in files)
        what = f"copying {snapshot.hf_id}@{snapshot.revision} from the cluster cache {self.location}"
        try:
            for name in files:
                (partial / name).parent.mkdir(parents=True, exist_ok=True)
            with report_progress(what, partial, total, len(files)):
                fs.get([f"{snapshot.path}/{n}" for n in files], [str(partial / n) for n in files])
        except Exception as exc:
            shutil.rmtree(partial, ignore_errors=True)
            if out_of_space(exc):
                why = f"the copy of {snapshot.hf_id} ran out of room"
                raise local.full(why, total, "the partial copy was removed") from exc
            raise ClusterUnreachable(f"copy broke off: {_reason(exc)}") from exc
        if final.exists():  # another process finished the same copy first
            shutil.rmtree(partial, ignore_errors=True)
        else:
            partial.rename(final)
        if snapshot.from_ref:
            self._write_ref(model_dir, snapshot)
        skipped = len(snapshot.sizes) - len(files)
        log.info(
            "copied %d files of %s (%d skipped: no adapter reads them) to %s",
            len(files),
            snapshot.hf_id,
            skipped,
            final,
        )
        return final

    @staticmethod
    def _write_ref(model_dir: Path, snapshot: ClusterSnapshot) -> None:
        """``refs/<ref>`` names the copied commit; without it (a full disk has no room even for that)
        the snapshot still serves an unpinned load (the newest snapshot); one pinned to the ref asks
        the cluster cache again."""
        assert snapshot.from_ref is not None
        try:
            refs = model_dir / "refs"
            refs.mkdir(exist_ok=True)
            (refs / snapshot.from_ref).write_text(snapshot.revision)
        except OSError as exc:
            log.warning("could not record refs/%s of %s: %s", snapshot.from_ref, snapshot.hf_id, exc)
