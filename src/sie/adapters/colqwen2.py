"""ColQwen2.5 visual document retrieval: a page image becomes one vector per merged image patch (and
per token of its prompt), a text query one per token, scored by late interaction (MaxSim) as ColPali's.

The model is transformers' ``Qwen2_5_VLModel`` with the one linear projection to 128 dimensions that
colpali-engine's ``ColQwen2_5`` adds (``custom_text_proj``); ``page_retrieval`` says how the vectors
come out. It runs as colpali-engine runs it: ``input_ids``, ``pixel_values``,
``image_grid_thw`` and the processor's ``mm_token_type_ids`` go to the VLM, so image tokens get
Qwen2.5-VL's 3D rotary positions (transformers' own ``ColQwen2ForRetrieval`` gives them text
positions, and differs). The prompts are colpali-engine's: a page is its visual prompt
(``Describe the image.``), a text is followed by ten ``<|endoftext|>`` query-augmentation tokens.
Pages are resized to 256 to 768 merged patches of 28 pixels, as the public server does.

``vidore/colqwen2.5-v0.2`` is a PEFT LoRA over ``vidore/colqwen2.5-base``: the base's weights come
through the engine's weight tiers (``LoadSpec.fetch``), are read under the older names colpali-engine
maps on load (``model.layers`` for ``language_model.layers``), and the LoRA is merged by peft into
them, so a forward costs what the base's does. A base or LoRA weight with no place fails the load.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

import torch
import transformers
from PIL import Image
from torch import nn
from transformers import AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLModel, Qwen2VLProcessor
from transformers.models.auto.image_processing_auto import AutoImageProcessor

from sie.adapters.base import LoadSpec
from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.page_retrieval import PageRetriever
from sie.adapters.state_dicts import folder_state_dict
from sie.core.options import Capability

EMBEDDING_DIM: Final = 128
VISUAL_PROMPT: Final = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the image.<|im_end|><|endoftext|>"
)
QUERY_SUFFIX: Final = "<|endoftext|>" * 10
PATCH_PIXELS: Final = 28 * 28
MIN_PIXELS: Final = 256 * PATCH_PIXELS
MAX_PIXELS: Final = 768 * PATCH_PIXELS
# Older checkpoints' names for transformers 5's (the renames colpali-engine applies on load).
RENAMES: Final = (
    (re.compile(r"^base_model\.model\.custom_text_proj"), "custom_text_proj"),
    (re.compile(r"^model\.layers"), "language_model.layers"),
    (re.compile(r"^model\.embed_tokens"), "language_model.embed_tokens"),
    (re.compile(r"^model\.norm"), "language_model.norm"),
)
PEFT_PREFIX: Final = "base_model.model."
LORA_FILES: Final = ("adapter_model.safetensors", "adapter_model.bin")


def colqwen2_5(config: Any) -> Any:
    """Qwen2.5-VL's base model with the retrieval projection beside its towers, where colpali-engine's
    ``ColQwen2_5`` (a subclass) has it: the module paths, and so the checkpoints' keys and a LoRA's
    targets, are the same."""
    model: Any = Qwen2_5_VLModel(config)  # type: ignore[no-untyped-call]
    model.add_module("custom_text_proj", nn.Linear(config.text_config.hidden_size, EMBEDDING_DIM))
    return model


def renamed(key: str, prefix: str = "") -> str:
    """A checkpoint key under transformers 5's names; a LoRA's keys keep PEFT's ``prefix``."""
    inner = key.removeprefix(prefix)
    for pattern, name in RENAMES:
        inner = pattern.sub(name, inner)
    return prefix + inner


def load_model(spec: LoadSpec, dtype: torch.dtype) -> Any:
    """The base's weights, with the folder's LoRA merged in when the folder is a PEFT adapter."""
    folder = spec.weights
    lora = folder / "adapter_config.json"
    base = folder
    if lora.is_file():
        base_id = json.loads(lora.read_text()).get("base_model_name_or_path")
        if not base_id or spec.fetch is None:
            raise ValueError(f"{folder} is a LoRA whose base model cannot be fetched ({base_id!r})")
        base = spec.fetch(str(base_id), None, None)
    model = colqwen2_5(Qwen2_5_VLConfig.from_pretrained(str(base)))
    weights = {renamed(key): value for key, value in folder_state_dict(base).items()}
    result = model.load_state_dict(weights, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(
            f"{base} does not fit ColQwen2.5: missing {result.missing_keys[:5]}, "
            f"unexpected {result.unexpected_keys[:5]}"
        )
    if lora.is_file():
        model = merged_lora(model, folder)
    return model.to(dtype).eval()


def merged_lora(model: Any, folder: Path) -> Any:
    """``model`` with the PEFT LoRA in ``folder`` merged into its weights (peft's own merge)."""
    from peft import LoraConfig, PeftModel, set_peft_model_state_dict

    config = LoraConfig.from_pretrained(str(folder))
    weights = {
        renamed(key, PEFT_PREFIX): value for key, value in folder_state_dict(folder, LORA_FILES).items()
    }
    wrapped = PeftModel(model, config)
    result: Any = set_peft_model_state_dict(wrapped, weights)
    unset = [key for key in result.missing_keys if ".lora_" in key]
    if result.unexpected_keys or unset:
        raise ValueError(
            f"LoRA at {folder} does not fit its base: unexpected {result.unexpected_keys[:5]}, unset {unset[:5]}"
        )
    return wrapped.merge_and_unload()


def pages_processor(images: Any, tokenizer: Any) -> Any:
    """Qwen2-VL's processor for pages and texts. Its constructor insists on a video processor, which
    needs torchvision (not installed); without it transformers exports a placeholder class, and an
    uninitialised instance of that satisfies the type check. No video ever reaches it."""
    videos = object.__new__(transformers.BaseVideoProcessor)
    return Qwen2VLProcessor(image_processor=images, tokenizer=tokenizer, video_processor=videos)  # type: ignore[no-untyped-call]


class ColQwen2Encoder(PageRetriever):
    family = "ColQwen2.5"

    def __init__(self, spec: LoadSpec) -> None:
        folder = str(spec.tokenizer_folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        tokenizer.padding_side = "left"  # colpali-engine's
        images = AutoImageProcessor.from_pretrained(  # type: ignore[no-untyped-call]
            folder, backend="pil", min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS
        )
        self._processor: Any = pages_processor(images, tokenizer)
        self.tokenizer = TokenizerVocabulary(tokenizer)
        self.model = load_model(spec, self._place(spec)).to(self.device)
        self.dims = {Capability.MULTIVECTOR: EMBEDDING_DIM}
        self._patch = int(images.patch_size) * int(images.merge_size)

    def _text(self, text: str) -> str:
        return text + QUERY_SUFFIX

    def _page_cost(self, page: Image.Image) -> int:
        """The merged patches a page becomes, bounded by the resize."""
        patches = -(-page.width // self._patch) * -(-page.height // self._patch)
        return max(MIN_PIXELS // PATCH_PIXELS, min(patches, MAX_PIXELS // PATCH_PIXELS))

    def _encode_pages(self, pages: list[Image.Image]) -> Any:
        prompts = [VISUAL_PROMPT] * len(pages)
        return self._processor(text=prompts, images=pages, padding="longest", return_tensors="pt")

    def _encode_texts(self, texts: list[str]) -> Any:
        return self._processor(text=texts, padding="longest", return_tensors="pt")

    def _embeddings(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.model(**inputs, use_cache=False).last_hidden_state
        projected: torch.Tensor = self.model.custom_text_proj(hidden)
        return projected
