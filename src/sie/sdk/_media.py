"""Turning an item's images and documents into the ``{"data": bytes, "format": str}`` the server reads.

The server never decodes base64 and never opens files, so everything must become raw bytes with a
format label before packing. Encoded bytes pass through untouched, labelled by their file signature;
bytes with no known signature, or a declared format that contradicts the signature, are refused here
rather than sent under a wrong label (as the public ``sie-sdk`` does). Paths, PIL images and HWC
arrays are re-encoded as JPEG (quality 95), which needs Pillow. Pillow is optional: a caller that
only sends text or bytes never needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import numpy as np

JPEG_QUALITY: Final = 95

_SIGNATURES: Final[tuple[tuple[bytes, str], ...]] = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"II+\x00", "tiff"),  # BigTIFF
    (b"MM\x00+", "tiff"),
)
_MAX_FORMAT_LENGTH: Final = 32
_DOCUMENT_SUFFIXES: Final[dict[str, str]] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".doc": "doc",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".rtf": "rtf",
    ".odt": "odt",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".csv": "csv",
}


def prepare_item(item: Any) -> Any:
    """The item as it goes on the wire; a text-only item is returned as is (no copy)."""
    if not isinstance(item, dict) or ("images" not in item and "document" not in item):
        return item
    wire = dict(item)
    if wire.get("images"):
        wire["images"] = [_image_to_wire(image) for image in wire["images"]]
    if wire.get("document") is not None:
        wire["document"] = _document_to_wire(wire["document"])
    return wire


def _image_to_wire(image: Any) -> dict[str, Any]:
    declared = None
    if isinstance(image, dict) and "data" in image:
        declared, image = image.get("format"), image["data"]
    if isinstance(image, bytes | bytearray | memoryview):
        data = bytes(image)
        detected = _sniff_image(data)
    else:
        data, detected = _to_jpeg(image), "jpeg"
    if declared is not None and _normalise_format(declared) != detected:
        raise ValueError(
            f"Image format mismatch: declared '{_normalise_format(declared)}', detected '{detected}'"
        )
    return {"data": data, "format": detected}


def _sniff_image(data: bytes) -> str:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    found = next((fmt for magic, fmt in _SIGNATURES if data.startswith(magic)), None)
    if found is None:
        raise ValueError(
            "Could not detect encoded image format from bytes (JPEG, PNG, GIF, WebP, BMP and TIFF are known)"
        )
    return found


def _normalise_format(value: object) -> str:
    """A declared format as a short lowercase token (``jpg`` is ``jpeg``); anything else is refused."""
    if not (
        isinstance(value, str)
        and 1 <= len(value) <= _MAX_FORMAT_LENGTH
        and all(c.isascii() and (c.isalnum() or c in ".+-") for c in value)
    ):
        raise ValueError("Image format must be a short ASCII media-format token")
    lowered = value.lower()
    return "jpeg" if lowered in ("jpg", "jpe") else lowered


def _to_jpeg(image: Any) -> bytes:
    """Re-encode a path, PIL image or array as JPEG; fails with the fix when Pillow is missing."""
    try:
        from PIL import Image  # optional dependency, imported only when an image needs it
    except ImportError as exc:
        raise ValueError(
            f"converting a {type(image).__name__} image needs Pillow (pip install pillow); "
            "or pass the encoded image bytes instead"
        ) from exc
    import io

    picture: Image.Image
    if isinstance(image, str | Path):
        picture = Image.open(Path(image))
    elif isinstance(image, np.ndarray):
        if image.ndim not in (2, 3):
            raise ValueError(f"an image array must be 2-D (grey) or 3-D (H, W, C), got {image.ndim}-D")
        picture = Image.fromarray(image)
    elif isinstance(image, Image.Image):
        picture = image
    else:
        raise ValueError(f"unsupported image type {type(image).__name__}; use bytes, a path, PIL or an array")
    if picture.mode not in ("RGB", "L"):  # JPEG holds neither alpha, palettes nor 16-bit samples
        picture = picture.convert("RGB")
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def _document_to_wire(document: Any) -> dict[str, Any]:
    declared: Any = None
    has_format = False
    if isinstance(document, dict) and "data" in document:
        has_format = "format" in document
        declared, document = document.get("format"), document["data"]
    if isinstance(document, bytes | bytearray | memoryview):
        data, inferred = bytes(document), None
    elif isinstance(document, str | Path):
        path = Path(document)
        data, inferred = path.read_bytes(), _DOCUMENT_SUFFIXES.get(path.suffix.lower())
    else:
        raise ValueError(f"unsupported document type {type(document).__name__}; use bytes or a path")
    # A caller's explicit format wins, even an explicit None ("let the server sniff it").
    return {"data": data, "format": declared if has_format else inferred}
