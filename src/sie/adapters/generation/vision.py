"""The processors of the vision-language generators: what turns a chat's images into the prompt's
image tokens and the pixels ``generate`` reads beside them.

Built from their parts, as the vision-language embedders build theirs (transformers' default image
processors need torchvision, which is not installed): Qwen3-VL's (``qwen3_vl.load_processor``: its PIL
image processor, bounded by ``loadtime.min_pixels`` / ``max_pixels`` as for its embedder) and
GLM-5.3's (``Glm5NextProcessor`` over its PIL image processor, at most 8,000 image tokens an image by
its own bound). Any other model, or a checkpoint without an image processor, reads text only.
"""

from __future__ import annotations

from typing import Any

from sie.adapters.contract import LoadSpec


def image_processor(spec: LoadSpec, config: Any) -> Any:
    """The model's processor when it reads images here, else None. The processors' modules are
    imported here, for a model that has one: they cost a text-only generator 0.4 s of its load."""
    if not (spec.weights / "preprocessor_config.json").is_file():
        return None
    if config.model_type not in ("qwen3_vl", "glm5_next"):
        return None
    import transformers
    from transformers import AutoTokenizer
    from transformers.models.glm5_next.image_processing_pil_glm5_next import Glm5NextImageProcessorPil
    from transformers.models.glm5_next.processing_glm5_next import Glm5NextProcessor

    from sie.adapters.qwen3_vl import MAX_PIXELS, MIN_PIXELS, chat_template_of, load_processor

    if config.model_type == "qwen3_vl":
        loadtime = spec.loadtime
        return load_processor(
            spec.weights,
            spec.tokenizer_folder,
            int(loadtime.get("min_pixels") or MIN_PIXELS),
            int(loadtime.get("max_pixels") or MAX_PIXELS),
        )
    tokenizer = AutoTokenizer.from_pretrained(str(spec.tokenizer_folder))
    return Glm5NextProcessor(  # type: ignore[no-untyped-call]
        image_processor=Glm5NextImageProcessorPil.from_pretrained(str(spec.weights)),
        tokenizer=tokenizer,
        video_processor=object.__new__(transformers.BaseVideoProcessor),  # no video reaches it
        chat_template=chat_template_of(spec.weights, tokenizer),
    )
