"""Microsoft's Florence-2 checkpoints read as transformers' native ``Florence2ForConditionalGeneration``.

microsoft/Florence-2-* (and fine-tunes of them such as Florence-2-FT-DocVQA) are published as Hub code:
a DaViT vision tower and a BART under that code's module names, a BART tokenizer to which the Hub
processor adds 1024 task and location tokens each time it is built, and a CLIP image processor.
transformers now ships the model natively; the renames and the config translation below are the facts
its conversion script records (the code is ours). Converting on load serves the public ids from their
own weights without running code from the Hub.

The native model marks where the image features go with placeholder tokens in front of the prompt, the
places the Hub code concatenated them to. Its conversion adds an ``<image>`` token for that and grows
the vocabulary; an added row of the tied output layer would be a token the checkpoint never had, with
an untrained logit. Here the placeholder is the pad token, which no prompt holds, so the vocabulary and
the output layer stay the checkpoint's own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import torch
from transformers import (
    AutoTokenizer,
    CLIPImageProcessorPil,
    Florence2Config,
    Florence2ForConditionalGeneration,
    Florence2Processor,
    Florence2VisionConfig,
    GenerationConfig,
)

from sie.adapters.runtime.state_dicts import folder_state_dict

# The tokens the Hub processor adds, in its order (their ids follow the BART vocabulary's).
TASK_TOKENS: Final = (
    "<od>",
    "</od>",
    "<ocr>",
    "</ocr>",
    *(f"<loc_{x}>" for x in range(1000)),
    *[
        "<cap>",
        "</cap>",
        "<ncap>",
        "</ncap>",
        "<dcap>",
        "</dcap>",
        "<grounding>",
        "</grounding>",
        "<seg>",
        "</seg>",
        "<sep>",
    ],
    # sic: the checkpoints' spelling of "description"
    *["<region_cap>", "</region_cap>", "<region_to_desciption>", "</region_to_desciption>"],
    *["<proposal>", "</proposal>", "<poly>", "</poly>", "<and>"],
)

# Phrases the grounding parser never reports as a grounded phrase: pronouns, determiners and words for
# the picture itself (the processor's ``phrase_grounding`` rule).
_UNGROUNDED: Final = (
    *[
        "it",
        "I",
        "me",
        "mine",
        "you",
        "your",
        "yours",
        "he",
        "him",
        "his",
        "she",
        "her",
        "hers",
        "they",
        "them",
        "their",
        "theirs",
        "one",
        "oneself",
    ],
    *[
        "we",
        "us",
        "our",
        "ours",
        "its",
        "myself",
        "yourself",
        "himself",
        "herself",
        "itself",
        "ourselves",
        "yourselves",
        "themselves",
    ],
    *[
        "this",
        "that",
        "these",
        "those",
        "who",
        "whom",
        "whose",
        "which",
        "what",
        "all",
        "another",
        "any",
        "anybody",
        "anyone",
        "anything",
    ],
    *[
        "each",
        "everybody",
        "everyone",
        "everything",
        "few",
        "many",
        "nobody",
        "none",
        "several",
        "some",
        "somebody",
        "someone",
    ],
    *["something", "image", "images", "the", "a", "an", "lots"],
    "each other",
    "one another",
    "the image",
    "a group",
    "other objects",
    "a set",
)
# One entry per parse the processor knows: it refuses a task whose parse is not configured.
POST_PROCESSOR_CONFIG: Final[dict[str, Any]] = {
    "ocr": {},
    "phrase_grounding": {"banned_grounding_tokens": list(_UNGROUNDED)},
    "pure_text": {},
    "description_with_bboxes": {},
    "description_with_polygons": {},
    "polygons": {},
    "bboxes": {},
    "description_with_bboxes_or_polygons": {},
}

# Module renames from the Hub code's names to the native model's, first match wins.
_RENAMES: Final = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"^vision_tower\.convs\.(\d+)\.proj\.", r"model.vision_tower.convs.\1.conv."),
        (r"^vision_tower\.convs\.(\d+)\.norm\.", r"model.vision_tower.convs.\1.norm."),
        (
            r"^vision_tower\.blocks\.(\d+\.\d+)\.(\w+_block)\.(conv[12])\.fn\.dw\.",
            r"model.vision_tower.blocks.\1.\2.\3.",
        ),
        (
            r"^vision_tower\.blocks\.(\d+\.\d+)\.(\w+_block)\.(window|channel)_attn\.norm\.",
            r"model.vision_tower.blocks.\1.\2.norm1.",
        ),
        (
            r"^vision_tower\.blocks\.(\d+\.\d+)\.(\w+_block)\.(window|channel)_attn\.fn\.",
            r"model.vision_tower.blocks.\1.\2.\3_attn.",
        ),
        (
            r"^vision_tower\.blocks\.(\d+\.\d+)\.(\w+_block)\.ffn\.norm\.",
            r"model.vision_tower.blocks.\1.\2.norm2.",
        ),
        (
            r"^vision_tower\.blocks\.(\d+\.\d+)\.(\w+_block)\.ffn\.fn\.net\.",
            r"model.vision_tower.blocks.\1.\2.ffn.",
        ),
        (r"^image_projection$", r"model.multi_modal_projector.image_projection.weight"),
        (r"^image_proj_norm\.", r"model.multi_modal_projector.image_proj_norm."),
        (r"^image_pos_embed\.", r"model.multi_modal_projector.image_position_embed."),
        (r"^visual_temporal_embed\.", r"model.multi_modal_projector.visual_temporal_embed."),
        (r"^language_model\.model\.", r"model.language_model."),
        (r"^language_model\.lm_head\.", r"lm_head."),
    )
)
_LOGITS_BIAS: Final = "language_model.final_logits_bias"
_SHARED: Final = "model.language_model.shared.weight"
# Tied to the shared embedding: a checkpoint that stores the shared one alone is whole.
_TIED: Final = frozenset(
    {
        "lm_head.weight",
        "model.language_model.encoder.embed_tokens.weight",
        "model.language_model.decoder.embed_tokens.weight",
    }
)


def is_hub_layout(config: dict[str, Any]) -> bool:
    """Whether ``config.json`` is the Hub code's (its DaViT names its widths ``dim_embed``)."""
    vision = config.get("vision_config")
    return isinstance(vision, dict) and "dim_embed" in vision


def native_config(config: dict[str, Any], placeholder_id: int) -> Florence2Config:
    """The native config of a Hub-layout one; a vision tower the native model does not build (another
    position embedding or feature pooling) is refused rather than read wrongly."""
    vision = config["vision_config"]
    positions = vision.get("image_pos_embed") or {"type": "learned_abs_2d", "max_pos_embeddings": 50}
    temporal = vision.get("visual_temporal_embedding") or {"type": "COSINE", "max_temporal_embeddings": 100}
    sources = list(vision.get("image_feature_source", ["spatial_avg_pool", "temporal_avg_pool"]))
    if (
        positions.get("type") != "learned_abs_2d"
        or temporal.get("type") != "COSINE"
        or sources != ["spatial_avg_pool", "temporal_avg_pool"]
    ):
        raise ValueError(
            "a Florence-2 vision tower with learned 2D positions, cosine temporal embeddings and spatial "
            f"+ temporal pooling is what the native model builds; this one has {positions.get('type')}, "
            f"{temporal.get('type')}, {sources}"
        )
    native_vision = Florence2VisionConfig(
        embed_dim=list(vision["dim_embed"]),
        depths=list(vision["depths"]),
        num_heads=list(vision["num_heads"]),
        num_groups=list(vision["num_groups"]),
        patch_size=list(vision["patch_size"]),
        patch_stride=list(vision["patch_stride"]),
        patch_padding=list(vision["patch_padding"]),
        patch_prenorm=list(vision["patch_prenorm"]),
        window_size=int(vision["window_size"]),
        projection_dim=int(vision.get("projection_dim", config.get("projection_dim", 1024))),
        max_position_embeddings=int(positions["max_pos_embeddings"]),
        max_temporal_embeddings=int(temporal["max_temporal_embeddings"]),
        drop_path_rate=0.0,
    )
    text = {**config["text_config"], "model_type": "bart"}  # the Hub code's language model is a BART
    return Florence2Config(text_config=text, vision_config=native_vision, image_token_id=placeholder_id)


def native_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under the native model's names; a key no rename knows is refused (it
    would be a weight the model silently does without)."""
    renamed: dict[str, torch.Tensor] = {}
    unknown = []
    for key, tensor in state.items():
        if key == _LOGITS_BIAS:
            if torch.count_nonzero(tensor):
                raise ValueError(
                    "this Florence-2 checkpoint has a non-zero final_logits_bias the native model lacks"
                )
            continue
        for pattern, replacement in _RENAMES:
            if pattern.search(key):
                new = pattern.sub(replacement, key)
                renamed[new] = tensor.T.contiguous() if key == "image_projection" else tensor
                break
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(
            f"Florence-2 checkpoint keys with no place in the model: {', '.join(sorted(unknown)[:5])}"
        )
    return renamed


def hub_tokenizer(folder: Path) -> Any:
    """The checkpoint's BART tokenizer as the Hub processor builds it (task and location tokens added
    unless the saved tokenizer has them), with the pad token as the image placeholder."""
    tokenizer: Any = AutoTokenizer.from_pretrained(str(folder))
    if "<loc_0>" not in tokenizer.get_vocab():
        tokenizer.add_special_tokens({"additional_special_tokens": list(TASK_TOKENS)})
    tokenizer.image_token = tokenizer.pad_token
    tokenizer.image_token_id = tokenizer.pad_token_id
    return tokenizer


def image_tokens(config: Florence2VisionConfig, height: int, width: int) -> int:
    """The features one image gives: one per cell of the last stage's grid, plus the pooled one."""
    for stride in config.patch_stride:
        height, width = -(-height // stride), -(-width // stride)  # each stage's padded conv
    return height * width + 1


def generation_defaults(text_config: dict[str, Any]) -> GenerationConfig:
    """What the Hub code's language model generates with: the generation keys of its config (BART's
    ``forced_eos_token_id``, the ``no_repeat_ngram_size`` some checkpoints set)."""
    make: Any = GenerationConfig
    known = make().to_dict().keys()
    generation: GenerationConfig = make(**{key: value for key, value in text_config.items() if key in known})
    return generation


def load_hub_layout(
    folder: Path, raw: dict[str, Any], dtype: torch.dtype
) -> tuple[Any, Any, GenerationConfig]:
    """The native model, its processor and the generation defaults of a Hub-layout checkpoint whose
    ``config.json`` is ``raw``."""
    tokenizer = hub_tokenizer(folder)
    config: Any = native_config(raw, tokenizer.pad_token_id)
    vocabulary = int(config.text_config.vocab_size)
    if len(tokenizer) > vocabulary:
        raise ValueError(f"the Florence-2 tokenizer has {len(tokenizer)} tokens, the model {vocabulary}")
    state = native_state_dict(folder_state_dict(folder))
    stored = next((key for key in (_SHARED, *sorted(_TIED)) if key in state), None)
    if stored is not None:  # a checkpoint may keep any one of the tied copies
        state.setdefault(_SHARED, state[stored])
    with torch.device("meta"):
        model: Any = Florence2ForConditionalGeneration(config)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    absent = set(missing) - _TIED
    if absent or unexpected:
        shown = ", ".join(sorted(absent | set(unexpected))[:5])
        raise ValueError(f"{folder} does not fit Florence-2 ({config.text_config.d_model} wide): {shown}")
    model.tie_weights()
    if any(tensor.is_meta for tensor in (*model.parameters(), *model.buffers())):
        raise ValueError(f"{folder}: the Florence-2 checkpoint leaves weights of the model unset")
    images: Any = CLIPImageProcessorPil.from_pretrained(str(folder))
    size = images.size
    images.image_seq_length = image_tokens(config.vision_config, int(size["height"]), int(size["width"]))
    processor = Florence2Processor(
        image_processor=images, tokenizer=tokenizer, post_processor_config=POST_PROCESSOR_CONFIG
    )
    return model.to(dtype).eval(), processor, generation_defaults(raw["text_config"])
