"""Decoding a client's image bytes with Pillow, on the CPU pool, before any pixel reaches a model.

The format is sniffed from the bytes (the request's ``format`` is a hint that clients often get
wrong, so it is not trusted). Size is checked from the header before the pixels are decoded, so a
small file that claims a huge canvas (a decompression bomb) costs nothing but its header.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Final

from PIL import Image, UnidentifiedImageError

from sie.adapters.batch import ImageData, ModelInput
from sie.core.task import UnsupportedInput

# Pillow's own warning threshold (about 89 megapixels): past it the server refuses instead of warning.
MAX_PIXELS: Final = int(Image.MAX_IMAGE_PIXELS or 89_478_485)


def decode_image(image: ImageData) -> Image.Image:
    """The image's first frame, fully decoded; anything Pillow cannot read is ``UnsupportedInput``."""
    if not image.data:
        raise UnsupportedInput("Image data is empty")
    try:
        opened = Image.open(io.BytesIO(image.data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        # Pillow's own check at open: an error past twice its limit, a warning (an error where
        # warnings are errors) past it; the size check below refuses the warned ones too.
        raise UnsupportedInput(f"Image is larger than {MAX_PIXELS} pixels: {exc}") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        hint = f" (format '{image.format}')" if image.format else ""
        raise UnsupportedInput(f"Image data{hint} is not an image Pillow can decode: {exc}") from None
    width, height = opened.size
    if width * height > MAX_PIXELS:
        raise UnsupportedInput(f"Image of {width}x{height} is larger than {MAX_PIXELS} pixels")
    if width < 1 or height < 1:
        raise UnsupportedInput(f"Image of {width}x{height} has no pixels")
    try:
        opened.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise UnsupportedInput(f"Image data ({opened.format}) is truncated or corrupt: {exc}") from None
    return opened


def rgb_images(inputs: Sequence[ModelInput], needs_image: str) -> list[Image.Image]:
    """Each item's image decoded as RGB, for the families that read images alone; an item without
    one is the client's error, ``needs_image`` saying what the family reads."""
    images = []
    for one in inputs:
        if not isinstance(one, ImageData):
            raise UnsupportedInput(needs_image)
        images.append(decode_image(one).convert("RGB"))
    return images


def sample_image() -> ImageData:
    """A small grey PNG, for a warm-up forward through a model's image side."""
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (128, 128, 128)).save(out, format="PNG")
    return ImageData(out.getvalue(), "png")
