"""The last tier: a snapshot from the Hugging Face Hub into the local cache, with ``huggingface_hub``.

The repository's file list is read first, so the download fetches only what an adapter of this kind
reads (``weight_files.needed_files``) and the disk cache can make room for its size beforehand.
Errors are split the way an operator acts on them: the Hub said the repository, revision or file does
not exist (or we are offline) -> ``HubMiss``; the local disk ran out of room -> ``DiskFull``; anything
else (connection, timeout, 5xx, refused token) -> ``HubUnreachable``, which may heal.

``huggingface_hub`` links each file into the snapshot folder as it arrives, so a download that stops
half way (a full disk, a broken connection, a killed process) would leave a snapshot with some files,
which the next load would trust. The download goes to a staging cache beside the models
(``.sie-download-<pid>``, which the disk LRU never counts as a model) and is moved into place once
complete: blobs first, then the snapshot folder by one rename. What fails is removed with its staging
folder (a file the cache already had is downloaded again, the price of never trusting half a
snapshot).
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from sie.weights.disk_cache import DiskCache, folder_name
from sie.weights.errors import DiskFull, TooLarge, out_of_space
from sie.weights.files import needed_files
from sie.weights.progress import report_progress


class HubMiss(Exception):
    """The Hub has no such model (or revision), or the Hub is switched off; ``str()`` says which."""


class HubUnreachable(Exception):
    """The Hub could not be asked or the download broke off; ``str()`` says why."""


def _reason(exc: BaseException) -> str:
    first_line = next(iter(str(exc).strip().splitlines()), "")[:160]
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


def download(
    hf_id: str, revision: str | None, local: DiskCache, onnx: bool, make_room: Callable[[int], object]
) -> Path:
    """The local snapshot folder of ``hf_id`` after downloading the files it needs. ``make_room`` gets
    their total size before anything is fetched; it may refuse with ``TooLarge`` or ``DiskFull``."""
    try:
        from huggingface_hub import HfApi, constants, snapshot_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise HubMiss("huggingface_hub not installed") from None
    if constants.HF_HUB_OFFLINE:
        raise HubMiss("offline: HF_HUB_OFFLINE is set")
    missing = (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError, LocalEntryNotFoundError)
    staging = local.root / f".sie-download-{os.getpid()}"
    total = 0
    try:
        # model_info, not list_repo_tree: the tree listing retries a refused connection for ~25 s.
        info = HfApi().model_info(hf_id, revision=revision, files_metadata=True)
        sizes = {sibling.rfilename: int(sibling.size or 0) for sibling in info.siblings or []}
        files = needed_files(sizes, onnx)
        total = sum(sizes[name] for name in files)
        make_room(total)
        shutil.rmtree(staging, ignore_errors=True)
        with report_progress(f"downloading {hf_id} from the Hugging Face Hub", staging, total, len(files)):
            staged = snapshot_download(
                hf_id,
                revision=revision,
                cache_dir=str(staging),
                allow_patterns=[glob.escape(name) for name in files],
            )
        return _settle(Path(staged), local.root / folder_name(hf_id))
    except (TooLarge, DiskFull):  # ``make_room``'s refusals: before a byte was fetched
        raise
    except missing as exc:
        raise HubMiss(_reason(exc)) from exc
    except Exception as exc:  # connection errors, timeouts, 5xx, 401/403: it may work later
        if out_of_space(exc):
            why = f"the download of {hf_id} ran out of room"
            raise local.full(why, total, "the partial download was removed") from exc
        raise HubUnreachable(_reason(exc)) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _settle(staged: Path, model_dir: Path) -> Path:
    """Move a complete staged snapshot (``<staging>/models--x/snapshots/<commit>``) into ``model_dir``
    of the cache: the blobs it links to (a blob already there stays), then the snapshot folder in one
    rename, then its refs and ``huggingface_hub``'s listing of the commit. A snapshot folder already
    there (another process's, or one with another adapter kind's files) gets the files it lacks.
    Returns the cache's snapshot folder."""
    staged_model = staged.parent.parent
    for sub in ("blobs", "snapshots"):
        (model_dir / sub).mkdir(parents=True, exist_ok=True)
    blobs = staged_model / "blobs"
    if blobs.is_dir():
        for blob in blobs.iterdir():
            if not (model_dir / "blobs" / blob.name).exists():
                blob.rename(model_dir / "blobs" / blob.name)
    final = model_dir / "snapshots" / staged.name
    if not final.exists():
        staged.rename(final)
    else:
        for entry in sorted(staged.rglob("*")):
            target = final / entry.relative_to(staged)
            if entry.is_dir():
                target.mkdir(exist_ok=True)
            elif not target.exists() and not target.is_symlink():
                entry.rename(target)  # a link relative to its own folder: the same depth here
    for sub in ("refs", "trees"):  # what a ref names; huggingface_hub's listing of a commit
        for staged_file in (staged_model / sub).rglob("*"):
            if staged_file.is_file():
                target = model_dir / sub / staged_file.relative_to(staged_model / sub)
                target.parent.mkdir(parents=True, exist_ok=True)
                staged_file.replace(target)
    return final
