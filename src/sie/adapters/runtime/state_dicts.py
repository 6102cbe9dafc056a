"""Reading a checkpoint's tensors from the files Hub repositories keep them in.

A repository holds its weights as safetensors or as a PyTorch pickle (``pytorch_model.bin``, BGE-M3's
``sparse_linear.pt``), in one file or in shards an index names. Pickles are read with
``weights_only=True``: tensors, never code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import torch
from safetensors.torch import load_file

# The whole-model files, safetensors first (a repository that has both keeps the same tensors in each).
MODEL_FILES: Final = ("model.safetensors", "pytorch_model.bin")


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """One file's tensors, by its suffix."""
    if path.suffix == ".safetensors":
        return load_file(str(path))
    state: dict[str, torch.Tensor] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def folder_state_dict(folder: Path, names: tuple[str, ...] = MODEL_FILES) -> dict[str, torch.Tensor]:
    """The tensors of the first of ``names`` the folder has, whole or sharded (``<name>.index.json``)."""
    for name in names:
        path = folder / name
        if path.exists():
            return read_state_dict(path)
        index = folder / f"{name}.index.json"
        if index.exists():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return {
                key: tensor for shard in shards for key, tensor in read_state_dict(folder / shard).items()
            }
    raise FileNotFoundError(f"{folder} holds no weights ({' or '.join(names)})")
