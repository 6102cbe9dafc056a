"""The last tier: a snapshot from the Hugging Face Hub into the local cache, with ``huggingface_hub``.

The repository's file list is read first, so the download fetches only what an adapter of this kind
reads (``weight_files.needed_files``) and the disk cache can make room for its size beforehand.
Errors are split the way an operator acts on them: the Hub said the repository, revision or file does
not exist (or we are offline) -> ``HubMiss``; anything else (connection, timeout, 5xx, refused token)
-> ``HubUnreachable``, which may heal.
"""

from __future__ import annotations

import glob
from collections.abc import Callable
from pathlib import Path

from sie.weights.disk_cache import folder_name
from sie.weights.errors import TooLarge
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
    hf_id: str, revision: str | None, cache_root: Path, onnx: bool, make_room: Callable[[int], object]
) -> Path:
    """The local snapshot folder of ``hf_id`` after downloading the files it needs. ``make_room`` gets
    their total size before anything is fetched; it may refuse with ``TooLarge``."""
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
    try:
        # model_info, not list_repo_tree: the tree listing retries a refused connection for ~25 s.
        info = HfApi().model_info(hf_id, revision=revision, files_metadata=True)
        sizes = {sibling.rfilename: int(sibling.size or 0) for sibling in info.siblings or []}
        files = needed_files(sizes, onnx)
        total = sum(sizes[name] for name in files)
        make_room(total)
        with report_progress(
            f"downloading {hf_id} from the Hugging Face Hub",
            cache_root / folder_name(hf_id),
            total,
            len(files),
        ):
            folder = snapshot_download(
                hf_id,
                revision=revision,
                cache_dir=str(cache_root),
                allow_patterns=[glob.escape(name) for name in files],
            )
    except TooLarge:  # ``make_room``'s cap: refused before a byte was fetched
        raise
    except missing as exc:
        raise HubMiss(_reason(exc)) from exc
    except Exception as exc:  # connection errors, timeouts, 5xx, 401/403: it may work later
        raise HubUnreachable(_reason(exc)) from exc
    return Path(folder)
