"""Image inputs of ``/v1/embeddings`` (``modality: "image"``) and of chat messages (``image_url``
parts): RFC 2397 data URIs, never URLs.

Infinity also accepts ``http(s)://`` URLs and fetches them. This server does not: fetching a URL a
client names would let any client make the server reach hosts only it can reach (cloud metadata
endpoints, internal services), and would tie a request's latency and failure to a third party. A
client that has a URL downloads it and sends the bytes (a data URI here, or ``images`` on
``/v1/encode``).
"""

from __future__ import annotations

import binascii
import re
from base64 import b64decode
from typing import Final

from sie.wire.requests import ImageInput

# data:image/<subtype>[;param=value...];base64,<payload>
_DATA_URI: Final = re.compile(
    r"data:image/(?P<subtype>[\w.+-]+)(?P<params>(?:;[\w.+-]+=[\w.+%-]+)*);base64,(?P<payload>.*)",
    re.DOTALL | re.IGNORECASE,
)


class BadImageInput(ValueError):
    """An ``input`` entry that is no base64 image data URI (the route answers 400)."""


def image_from_data_uri(value: str, where: str) -> ImageInput:
    """The bytes and format of one data URI; ``where`` names the entry in the error (``input[2]``)."""
    found = _DATA_URI.fullmatch(value.strip())
    if found is None:
        if re.match(r"https?://", value.strip(), re.IGNORECASE):
            raise BadImageInput(
                f"{where} is a URL; this server does not fetch URLs (a server-side request "
                "forgery risk): send the image as a data URI, data:image/png;base64,..."
            )
        raise BadImageInput(f"{where} must be a base64 data URI: data:image/<format>;base64,<data>")
    try:
        data = b64decode(re.sub(r"\s+", "", found["payload"]), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadImageInput(f"{where} holds invalid base64: {exc}") from None
    subtype = found["subtype"].lower()
    return ImageInput(data=data, format="jpeg" if subtype in ("jpg", "pjpeg") else subtype)
