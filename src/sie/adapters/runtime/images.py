"""Decoding a client's image bytes with Pillow, on the CPU pool, before any pixel reaches a model.

The format is sniffed from the bytes (the request's ``format`` is a hint that clients often get
wrong, so it is not trusted), among the formats the families read and the SDK sends only: Pillow
would otherwise try each of its dozens of plugins (EPS would run Ghostscript where installed).
Size is read from the header alone (``image_size``), so a small file that claims a huge canvas (a
decompression bomb) costs nothing but its header: the engine checks every image of a request that
way before any is decoded (``sie.engine.pixels``).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Final

from PIL import Image, UnidentifiedImageError

from sie.adapters.batch import ImageData, MediaPair, ModelInput
from sie.core.task import UnsupportedInput

# What the families read and the SDK labels (``sie.sdk._media``); Pillow's plugin names.
FORMATS: Final = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")
# Pillow's own warning threshold (about 89 megapixels): past it nothing is decoded whatever the
# settings say; the engine's per-image maximum (``SIE_MAX_IMAGE_PIXELS``) may only be lower.
MAX_PIXELS: Final = int(Image.MAX_IMAGE_PIXELS or 89_478_485)

_READ: Final = ", ".join(FORMATS[:-1]) + f" or {FORMATS[-1]}"


def images_of(inputs: Sequence[ModelInput]) -> list[ImageData]:
    """Every image among a request's inputs (both sides of an image pair included), in order."""
    found: list[ImageData] = []
    for one in inputs:
        if isinstance(one, ImageData):
            found.append(one)
        elif isinstance(one, MediaPair):
            found.extend(side for side in (one.query, one.document) if isinstance(side, ImageData))
    return found


def image_size(image: ImageData) -> tuple[int, int]:
    """Width and height from the image's header; nothing past the header is read or decoded."""
    return _opened(image).size


def decode_image(image: ImageData) -> Image.Image:
    """The image's first frame, fully decoded; anything Pillow cannot read is ``UnsupportedInput``."""
    opened = _opened(image)
    try:
        opened.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise UnsupportedInput(f"Image data ({opened.format}) is truncated or corrupt: {exc}") from None
    return opened


def _opened(image: ImageData) -> Image.Image:
    """The image opened lazily (its header parsed, its pixels not), refused when it is empty, in a
    format the server does not read, bigger than Pillow's ceiling, or without pixels."""
    if not image.data:
        raise UnsupportedInput("Image data is empty")
    hint = f" (format '{image.format}')" if image.format else ""
    try:
        opened = Image.open(io.BytesIO(image.data), formats=FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        # Pillow's own check at open: an error past twice its limit, a warning (an error where
        # warnings are errors) past it; the size check below refuses the warned ones too.
        raise UnsupportedInput(f"Image is larger than {MAX_PIXELS} pixels: {exc}") from None
    except UnidentifiedImageError:
        # Pillow's message names the buffer object, nothing a client can act on.
        raise UnsupportedInput(
            f"Image data{hint} is not an image in a format the server reads ({_READ}), or its header is corrupt"
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise UnsupportedInput(f"Image data{hint} is not an image Pillow can decode: {exc}") from None
    width, height = opened.size
    if width * height > MAX_PIXELS:
        raise UnsupportedInput(f"Image of {width}x{height} is larger than {MAX_PIXELS} pixels")
    if width < 1 or height < 1:
        raise UnsupportedInput(f"Image of {width}x{height} has no pixels")
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
