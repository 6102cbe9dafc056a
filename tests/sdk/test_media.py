"""Images and documents become ``{"data": bytes, "format": str}`` before packing."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from sie.sdk._media import prepare_item

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 8
HAS_PIL = importlib.util.find_spec("PIL") is not None


def test_text_only_items_are_not_copied():
    item = {"id": "a", "text": "hello"}
    assert prepare_item(item) is item


def test_encoded_bytes_pass_through_labelled_by_signature():
    item = {
        "text": "t",
        "images": [PNG, {"data": JPEG, "format": "jpg"}, b"GIF89a...", b"RIFF\0\0\0\0WEBPVP8 "],
    }
    wire = prepare_item(item)
    assert [image["format"] for image in wire["images"]] == ["png", "jpeg", "gif", "webp"]
    assert wire["images"][0]["data"] == PNG
    assert item["images"][0] is PNG  # the caller's item is left alone


def test_unknown_bytes_are_refused_rather_than_mislabelled():
    for image in (b"????", {"data": b"????", "format": "PNG"}):
        with pytest.raises(ValueError, match="Could not detect encoded image format"):
            prepare_item({"images": [image]})


def test_a_declared_format_must_match_the_bytes():
    assert prepare_item({"images": [{"data": PNG, "format": "PNG"}]})["images"][0]["format"] == "png"
    assert (
        prepare_item({"images": [{"data": b"II+\x00....", "format": "tiff"}]})["images"][0]["format"]
        == "tiff"
    )
    with pytest.raises(ValueError, match="declared 'jpeg', detected 'png'"):
        prepare_item({"images": [{"data": PNG, "format": "jpg"}]})
    with pytest.raises(ValueError, match="media-format token"):
        prepare_item({"images": [{"data": PNG, "format": "image/png; x"}]})


def test_document_bytes_and_paths(tmp_path):
    pdf = tmp_path / "report.PDF"
    pdf.write_bytes(b"%PDF-1.7")
    assert prepare_item({"document": b"<html/>"})["document"] == {"data": b"<html/>", "format": None}
    assert prepare_item({"document": pdf})["document"] == {"data": b"%PDF-1.7", "format": "pdf"}
    assert prepare_item({"document": {"data": str(pdf), "format": "docx"}})["document"]["format"] == "docx"
    assert prepare_item({"document": {"data": str(pdf), "format": None}})["document"]["format"] is None


def test_unsupported_document_type_names_the_type():
    with pytest.raises(ValueError, match="int"):
        prepare_item({"document": 42})


@pytest.mark.skipif(HAS_PIL, reason="Pillow is installed")
def test_arrays_without_pillow_say_what_to_install():
    with pytest.raises(ValueError, match="pip install pillow"):
        prepare_item({"images": [np.zeros((2, 2, 3), dtype=np.uint8)]})


@pytest.mark.skipif(not HAS_PIL, reason="Pillow is not installed")
def test_arrays_with_pillow_become_jpeg():
    wire = prepare_item({"images": [np.zeros((4, 4, 3), dtype=np.uint8)]})
    assert wire["images"][0]["format"] == "jpeg"
    assert wire["images"][0]["data"].startswith(b"\xff\xd8\xff")


@pytest.mark.skipif(not HAS_PIL, reason="Pillow is not installed")
def test_modes_jpeg_cannot_hold_become_rgb():
    from PIL import Image

    for mode in ("RGBA", "P", "I;16", "1", "CMYK"):
        wire = prepare_item({"images": [Image.new(mode, (4, 4))]})
        assert wire["images"][0]["data"].startswith(b"\xff\xd8\xff"), mode
