"""ColSmol visual document retrieval: SmolVLM (transformers' ``Idefics3Model``) with the one linear
projection to 128 dimensions that colpali-engine's ``ColIdefics3`` adds (``linear``);
``page_retrieval`` says how the vectors come out.

The prompts are colpali-engine's ``ColIdefics3Processor``'s: a page is read behind its visual prompt
(``Describe the image.``), a text is followed by ten ``<end_of_utterance>`` query-augmentation tokens.
The processor is transformers' ``Idefics3Processor`` with the checkpoint's ``image_seq_len``: a page is
resized and split into tiles (plus the whole page, downscaled) by its PIL image processor, as the
public server's processor does with the checkpoint's settings.

``vidore/colSmol-256M`` is a PEFT LoRA over ``vidore/ColSmolVLM-Instruct-256M-base`` (full
ColIdefics3 weights): ``peft_checkpoints`` fetches the base through the weight tiers and merges the
LoRA into it on load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import torch
from PIL import Image
from torch import nn
from transformers import AutoTokenizer, Idefics3Model, Idefics3PreTrainedModel, Idefics3Processor

# transformers exports a placeholder for the PIL image processor when torchvision is absent, though the
# class itself needs none: taken from its module.
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.contract import LoadSpec
from sie.adapters.page_retrieval import PromptedPageRetriever
from sie.adapters.runtime.peft_checkpoints import load_with_lora
from sie.core.options import Capability

EMBEDDING_DIM: Final = 128
VISUAL_PROMPT: Final = "<|im_start|>User:<image>Describe the image.<end_of_utterance>\nAssistant:"
QUERY_SUFFIX: Final = "<end_of_utterance>" * 10

_IDEFICS3: Any = Idefics3PreTrainedModel  # untyped: subclassed below


class ColIdefics3(_IDEFICS3):  # type: ignore[misc]
    """Idefics3 with the retrieval projection, under colpali-engine's ``ColIdefics3`` module paths
    (``model``, ``linear``): the checkpoints' keys and a LoRA's targets."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.model = Idefics3Model(config)
        self.linear = nn.Linear(config.text_config.hidden_size, EMBEDDING_DIM)
        self.post_init()


def image_seq_len(folder: Path, config: Any) -> int:
    """The image tokens a tile becomes: the checkpoint's processor setting, else what its vision
    tower and pixel shuffle give (the formula transformers documents for it)."""
    processor_config = folder / "processor_config.json"
    if processor_config.is_file() and "image_seq_len" in (saved := json.loads(processor_config.read_text())):
        return int(saved["image_seq_len"])
    vision = config.vision_config
    return int((vision.image_size // vision.patch_size) ** 2 / config.scale_factor**2)


class ColSmolEncoder(PromptedPageRetriever):
    family = "ColSmol"
    visual_prompt = VISUAL_PROMPT
    query_suffix = QUERY_SUFFIX

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        folder = spec.tokenizer_folder
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        images = Idefics3ImageProcessorPil.from_pretrained(str(folder))
        self.model = load_with_lora(ColIdefics3, spec, self._place(spec), self.family).to(self.device)
        seq_len = image_seq_len(folder, self.model.config)
        self._use_processor(
            Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=seq_len)
        )
        self.tokenizer = TokenizerVocabulary(tokenizer)
        self.dims = {Capability.MULTIVECTOR: EMBEDDING_DIM}

    def _page_cost(self, page: Image.Image) -> int:
        """The image tokens the processor gives the page (its tiles and the whole page), and the
        prompt's other tokens."""
        counted = self._processor._get_num_multimodal_tokens(image_sizes=[(page.height, page.width)])
        return int(counted["num_image_tokens"][0]) + self._prompt_length

    def _embeddings(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.model.model(**inputs).last_hidden_state
        projected: torch.Tensor = self.model.linear(hidden)
        return projected
