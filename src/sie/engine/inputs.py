"""Which input of an item a model gets: its image when it has one, else its text.

The rule is the same for every operation and family, so it lives here rather than in each adapter:
a model declares the modalities it takes (``Adapter.inputs``), and an item it cannot take is refused
with 400 before any work.
"""

from __future__ import annotations

from dataclasses import replace

from sie.adapters.base import (
    Adapter,
    AnnotatedText,
    ImageData,
    ModelInput,
    reads_image_text,
    reads_item_metadata,
    reads_item_state,
)
from sie.core.options import Modality
from sie.engine.errors import InvalidInput
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
    return replace(image, text=item.text) if reads_image_text(adapter) else image


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
    if "state" in (item.metadata or {}) and reads_item_state(adapter):  # a Laya state stands in for the text
        if item.text is not None:
            raise InvalidInput(f"{adapter.family} items carry a text or metadata.state, not both")
        return AnnotatedText("", item.metadata or {})
    text = text_of(item, adapter)
    return AnnotatedText(text, item.metadata or {}) if reads_item_metadata(adapter) else text
