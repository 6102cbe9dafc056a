"""Which input of an item a model gets: its image when it has one, else its text, as the request's
plan and the family's traits shape it.

The rule is the same for every operation and family, so it lives here rather than in each adapter:
a model declares the modalities it takes (``Adapter.inputs``) and how it reads an item
(``Adapter.traits``), and an item it cannot take is refused with 400 before any work.
"""

from __future__ import annotations

from dataclasses import replace

from sie.adapters.batch import AnnotatedText, ImageData, ModelInput
from sie.adapters.contract import Adapter, Trait
from sie.catalog.encode_plan import EncodePlan
from sie.catalog.errors import InvalidInput
from sie.core.options import Modality
from sie.core.task import Task
from sie.wire.requests import Item


def image_of(item: Item, model: str, adapter: Adapter) -> ImageData | None:
    """The item's image, or None when it has none; refused when the model takes no images, and when
    there are several (every image model here embeds one image per item)."""
    if not item.images:
        return None
    if Modality.IMAGE not in adapter.inputs:
        raise InvalidInput(f"Model '{model}' does not support image input; it takes text")
    if len(item.images) > 1:
        raise InvalidInput(
            f"Model '{model}' takes one image per item, got {len(item.images)}; send them as separate items"
        )
    image = item.images[0]
    return ImageData(image.data, image.format)


def pair_side(item: Item, model: str, adapter: Adapter) -> str | ImageData:
    """One side of a pair for a pair scorer that reads images (``MediaPair``): the item's image, with
    its text beside it for a family that reads both, else its text."""
    image = image_of(item, model, adapter)
    if image is None:
        return text_of(item, adapter)
    return replace(image, text=item.text) if Trait.READS_IMAGE_TEXT in adapter.traits else image


def text_of(item: Item, adapter: Adapter) -> str:
    if item.text is None:
        raise InvalidInput(f"{adapter.family} adapters requires text input")
    return item.text


def extract_input(item: Item, model: str, adapter: Adapter) -> ModelInput:
    """What an extractor reads of an item: its image, else its text, with the item's metadata for a
    family that reads it (GLiREL's entities)."""
    image = image_of(item, model, adapter)
    if image is not None:
        return image
    if (
        "state" in (item.metadata or {}) and Trait.READS_ITEM_STATE in adapter.traits
    ):  # a Laya state stands in for the text; one sent beside a text is that item's error (the family's)
        return AnnotatedText(item.text or "", item.metadata or {})
    text = text_of(item, adapter)
    return AnnotatedText(text, item.metadata or {}) if Trait.READS_ITEM_METADATA in adapter.traits else text


def encode_input(plan: EncodePlan, item: Item, model: str, adapter: Adapter) -> ModelInput:
    """The item's image for a model that takes images (with its text beside it for a family that
    reads both), else ``encode_text`` of its text."""
    image = image_of(item, model, adapter)
    if image is None:
        return encode_text(plan, item, adapter)
    if item.text is not None and Trait.READS_IMAGE_TEXT in adapter.traits:
        return replace(image, text=encode_text(plan, item, adapter))
    return image


def encode_text(plan: EncodePlan, item: Item, adapter: Adapter) -> str:
    """The text the tokenizer sees: templates first, else ``"{instruction} {text}"`` (the bare text
    for a family that places the instruction itself, ``encode_task``)."""
    return plan.shaped(text_of(item, adapter), Trait.PLACES_INSTRUCTION in adapter.traits)


def encode_task(plan: EncodePlan, adapter: Adapter) -> Task | None:
    """The instruction for a family that places it itself (Qwen3-VL's system turn), else None."""
    if plan.instruction and Trait.PLACES_INSTRUCTION in adapter.traits:
        return Task(instruction=plan.instruction)
    return None
