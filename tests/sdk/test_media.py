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


def test_unknown_bytes_keep_the_callers_format_or_default_to_jpeg():
    wire = prepare_item({"images": [{"data": b"????", "format": "PNG"}, b"????"]})
    assert wire["images"] == [{"data": b"????", "format": "png"}, {"data": b"????", "format": "jpeg"}]


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
