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

import re
from typing import Any, Final

import torch
import transformers
from PIL import Image
from torch import nn
from transformers import AutoTokenizer, Qwen2_5_VLModel, Qwen2VLProcessor
from transformers.models.auto.image_processing_auto import AutoImageProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.contract import LoadSpec
from sie.adapters.page_retrieval import PromptedPageRetriever
from sie.adapters.runtime.peft_checkpoints import load_with_lora
from sie.core.options import Capability
from sie.core.task import UnsupportedInput

EMBEDDING_DIM: Final = 128
VISUAL_PROMPT: Final = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the image.<|im_end|><|endoftext|>"
)
QUERY_SUFFIX: Final = "<|endoftext|>" * 10
MIN_PIXELS: Final = 256 * 28 * 28
MAX_PIXELS: Final = 768 * 28 * 28
# Older checkpoints' names for transformers 5's (the renames colpali-engine applies on load).
KEY_MAPPING: Final = {
    r"^base_model\.model\.custom_text_proj": "custom_text_proj",
    r"^model\.layers": "language_model.layers",
    r"^model\.embed_tokens": "language_model.embed_tokens",
    r"^model\.norm": "language_model.norm",
}
RENAMES: Final = tuple((re.compile(pattern), name) for pattern, name in KEY_MAPPING.items())
PEFT_PREFIX: Final = "base_model.model."
# Qwen2-VL's processor refuses pages whose sides differ by more than this (smart_resize).
MAX_ASPECT: Final = 200

_QWEN2_5_VL: Any = Qwen2_5_VLModel  # untyped: subclassed below


class ColQwen25(_QWEN2_5_VL):  # type: ignore[misc]
    """Qwen2.5-VL's base model with the retrieval projection beside its towers, as colpali-engine's
    ``ColQwen2_5`` has it: the module paths, so the checkpoints' keys and a LoRA's targets, are the
    same. A subclass so that ``from_pretrained`` places the weights without initialising them first
    and computes the rotary buffers, in the dtype asked for."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.custom_text_proj = nn.Linear(config.text_config.hidden_size, EMBEDDING_DIM)
        self.post_init()


def lora_key(key: str) -> str:
    """A LoRA key of an older checkpoint under transformers 5's module paths (PEFT's prefix kept)."""
    prefix = PEFT_PREFIX if key.startswith(PEFT_PREFIX) else ""
    inner = key.removeprefix(prefix)
    for pattern, name in RENAMES:
        inner = pattern.sub(name, inner)
    return prefix + inner


def pages_processor(images: Any, tokenizer: Any) -> Any:
    """Qwen2-VL's processor for pages and texts. Its constructor insists on a video processor, which
    needs torchvision (not installed); without it transformers exports a placeholder class, and an
    uninitialised instance of that satisfies the type check. No video ever reaches it."""
    videos = object.__new__(transformers.BaseVideoProcessor)
    return Qwen2VLProcessor(image_processor=images, tokenizer=tokenizer, video_processor=videos)  # type: ignore[no-untyped-call]


class ColQwen2Encoder(PromptedPageRetriever):
    family = "ColQwen2.5"
    visual_prompt = VISUAL_PROMPT
    query_suffix = QUERY_SUFFIX

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        folder = str(spec.tokenizer_folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        images = AutoImageProcessor.from_pretrained(  # type: ignore[no-untyped-call]
            folder, backend="pil", min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS
        )
        self._use_processor(pages_processor(images, tokenizer))
        self.tokenizer = TokenizerVocabulary(tokenizer)
        dtype = self._place(spec)
        model = load_with_lora(ColQwen25, spec, dtype, self.family, KEY_MAPPING, lora_key)
        self.model = model.to(self.device)
        self.dims = {Capability.MULTIVECTOR: EMBEDDING_DIM}
        self._patch = int(images.patch_size) * int(images.merge_size)

    def _page_cost(self, page: Image.Image) -> int:
        """The merged patches the processor's resize gives the page, and the prompt's tokens."""
        if max(page.size) > MAX_ASPECT * min(page.size):
            raise UnsupportedInput(
                f"ColQwen2.5 reads pages whose sides differ by at most {MAX_ASPECT} times; "
                f"this one is {page.width}x{page.height}"
            )
        height, width = smart_resize(page.height, page.width, self._patch, MIN_PIXELS, MAX_PIXELS)
        return int(height * width // self._patch**2) + self._prompt_length

    def _embeddings(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.model(**inputs, use_cache=False).last_hidden_state
        projected: torch.Tensor = self.model.custom_text_proj(hidden)
        return projected
