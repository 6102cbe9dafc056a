"""How much memory a loaded model holds, found by looking at the adapter rather than asking it.

Adapters keep their weights as torch modules (parameters and buffers) or ONNX Runtime sessions (the
graph file's size stands for them, as ONNX Runtime does not report its arena). The walk follows the
adapter's attributes a few levels down (a backbone inside an adapter, a model inside a backbone), counts
each tensor storage once (tied weights, a LoRA wrapper and its base share storages), and never imports
torch or onnxruntime itself: a model can only hold their objects once they are imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, Final

MAX_DEPTH: Final = 4
_SCALARS: Final = (str, bytes, int, float, bool, type(None))


def memory_bytes(adapter: object) -> int:
    torch = sys.modules.get("torch")
    ort = sys.modules.get("onnxruntime")
    module_type = torch.nn.Module if torch is not None else None
    session_type = ort.InferenceSession if ort is not None else None
    seen_objects: set[int] = set()
    storages: dict[tuple[str, int], int] = {}
    files = 0

    def visit(obj: Any, depth: int) -> None:
        nonlocal files
        if isinstance(obj, _SCALARS) or id(obj) in seen_objects:
            return
        seen_objects.add(id(obj))
        if module_type is not None and isinstance(obj, module_type):
            for tensor in _tensors(obj):
                storage = tensor.untyped_storage()
                storages[(str(tensor.device), storage.data_ptr())] = storage.nbytes()
            return
        if session_type is not None and isinstance(obj, session_type):
            files += _file_size(getattr(obj, "_model_path", None))
            return
        if depth >= MAX_DEPTH:
            return
        for child in _children(obj):
            visit(child, depth + 1)

    visit(adapter, 0)
    return sum(storages.values()) + files


def _tensors(module: Any) -> Iterable[Any]:
    yield from module.parameters()
    yield from module.buffers()


def _children(obj: Any) -> Iterable[Any]:
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, list | tuple | set | frozenset):
        return list(obj)
    attributes = getattr(obj, "__dict__", None)
    return list(attributes.values()) if isinstance(attributes, dict) else []


def _file_size(path: object) -> int:
    if not isinstance(path, str) or not path:
        return 0
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
