"""Checkpoints published as a PEFT LoRA over another repository's model (``vidore/colqwen2.5-v0.2``
over ``vidore/colqwen2.5-base``, ``vidore/colSmol-256M`` over its ColSmolVLM base): the base comes
through the engine's weight tiers like any model, and peft merges the LoRA into it on load, so a
forward costs what the base's does and no PEFT layer stays in the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import torch

from sie.adapters.contract import LoadSpec
from sie.adapters.runtime.state_dicts import folder_state_dict

LORA_CONFIG: Final = "adapter_config.json"
LORA_FILES: Final = ("adapter_model.safetensors", "adapter_model.bin")


def is_lora(folder: Path) -> bool:
    return (folder / LORA_CONFIG).is_file()


def lora_base(spec: LoadSpec) -> Path:
    """The folder of the model a LoRA folder's ``base_model_name_or_path`` names, at its default
    revision (the LoRA's pinned revision is the LoRA repository's, not the base's)."""
    base_id = json.loads((spec.weights / LORA_CONFIG).read_text()).get("base_model_name_or_path")
    if not base_id or spec.fetch is None:
        raise ValueError(f"{spec.weights} is a LoRA whose base model cannot be fetched ({base_id!r})")
    return spec.fetch(str(base_id), None, None)


def merged_lora(model: Any, folder: Path, rename: Callable[[str], str] = str) -> Any:
    """``model`` with the LoRA in ``folder`` merged into its weights (peft's own merge); ``rename``
    maps the file's keys to the model's module paths when the checkpoint predates them. A LoRA weight
    without a place, or a LoRA layer left unset, fails the load."""
    from peft import LoraConfig, PeftModel, set_peft_model_state_dict

    config = LoraConfig.from_pretrained(str(folder))
    weights = {rename(key): value for key, value in folder_state_dict(folder, LORA_FILES).items()}
    wrapped = PeftModel(model, config)
    result: Any = set_peft_model_state_dict(wrapped, weights)
    unset = [key for key in result.missing_keys if ".lora_" in key]
    if result.unexpected_keys or unset:
        raise ValueError(
            f"LoRA at {folder} does not fit its base: unexpected {result.unexpected_keys[:5]}, unset {unset[:5]}"
        )
    return wrapped.merge_and_unload()


def checked(loaded: tuple[Any, dict[str, Any]], base: Path, family: str) -> Any:
    """The model of ``from_pretrained(..., output_loading_info=True)``, refused when a weight of the
    checkpoint has no place or a weight of the model was not in the checkpoint."""
    model, info = loaded
    missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
    if missing or unexpected:
        raise ValueError(f"{base} does not fit {family}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model


def load_with_lora(
    model_class: Any,
    spec: LoadSpec,
    dtype: torch.dtype,
    family: str,
    key_mapping: dict[str, str] | None = None,
    rename: Callable[[str], str] = str,
) -> Any:
    """``model_class`` from the folder, or from its base with the folder's LoRA merged in (loaded in
    float32 and cast after the merge: a merge in bfloat16 would round the sum). ``key_mapping`` is
    ``from_pretrained``'s renames for an older checkpoint; ``rename`` the same for the LoRA's keys."""
    lora = is_lora(spec.weights)
    base = lora_base(spec) if lora else spec.weights
    loaded = model_class.from_pretrained(
        str(base), key_mapping=key_mapping, dtype=torch.float32 if lora else dtype, output_loading_info=True
    )
    model = checked(loaded, base, family)
    if lora:
        model = merged_lora(model, spec.weights, rename)
    return model.to(dtype).eval()
