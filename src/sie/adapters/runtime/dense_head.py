"""The Dense layers a sentence-transformers folder applies to the pooled vector (its ``modules.json``):
EmbeddingGemma projects its mean-pooled 768 dims to 3072 and back to 768, stella_en_1.5B_v5 its 1536
to 1024. Skipping them answers a different vector than the model's, so the dense encoder runs them,
in float32 on the pooled float32 vectors, as sentence-transformers does.

A profile's loadtime ``dense_projection_path`` (the public server's option) names the folder of the
one Dense layer instead: stella ships one per output size (``2_Dense_256`` ... ``2_Dense_8192``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import torch

from sie.adapters.runtime.state_dicts import folder_state_dict

# sentence-transformers' ``activation_function`` names of the activations its Dense layers are saved
# with; another would be a layer we cannot run as trained, which fails the load.
_ACTIVATIONS: Final = {
    "torch.nn.modules.linear.Identity": torch.nn.Identity,
    "torch.nn.modules.activation.Tanh": torch.nn.Tanh,
}


class DenseHead:
    def __init__(self, layers: list[torch.nn.Sequential], out_features: int) -> None:
        self._layers = layers
        self.out_features = out_features  # the width of the vectors it answers

    @classmethod
    def of_folder(cls, folder: Path, device: torch.device, chosen: str | None = None) -> DenseHead | None:
        """The folder's Dense layers in order, or None when it lists none; ``chosen`` is the folder
        (relative to ``folder``) of the single layer to run instead."""
        paths = [chosen] if chosen else _listed(folder)
        if not paths:
            return None
        layers = [_layer(folder / path, device) for path in paths]
        return cls([layer for layer, _ in layers], layers[-1][1])

    def __call__(self, pooled: torch.Tensor) -> torch.Tensor:
        with torch.autocast(pooled.device.type, enabled=False):
            out = pooled.float()
            for layer in self._layers:
                out = layer(out)
            return out


def _listed(folder: Path) -> list[str]:
    """The paths of the Dense modules ``modules.json`` lists, in order."""
    modules = folder / "modules.json"
    if not modules.exists():
        return []
    entries: list[dict[str, Any]] = json.loads(modules.read_text())
    return [str(e["path"]) for e in entries if str(e.get("type", "")).rsplit(".", 1)[-1] == "Dense"]


def _layer(path: Path, device: torch.device) -> tuple[torch.nn.Sequential, int]:
    """The layer and its output width."""
    config = json.loads((path / "config.json").read_text())
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{path}: a Dense layer with activation {activation} is not supported")
    linear = torch.nn.Linear(
        int(config["in_features"]), int(config["out_features"]), bool(config.get("bias", True))
    )
    state = folder_state_dict(path)
    linear.load_state_dict({name.removeprefix("linear."): tensor for name, tensor in state.items()})
    return torch.nn.Sequential(linear, _ACTIVATIONS[activation]()).eval().to(device), linear.out_features
