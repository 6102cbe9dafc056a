"""Images within a budget (audit M6): what a client's image bytes may make the server decode.

A 9,400 x 9,400 PNG of one colour is some 280 KB on the wire and 265 MB once decoded; a body of
them (as many as the body limit holds) must be refused from the images' headers, in milliseconds,
before a single one is decoded. So must a request whose images each pass but together go over the
request's pixel budget, and any image in a format no family reads (Pillow would open dozens).

The real server app runs in process on a tiny CLIP built from a config (tests/builders.py), through
``httpx.ASGITransport``; the PNGs are written row by row (``_png``), so building them costs no
decoded canvas either."""

from __future__ import annotations

import asyncio
import io
import struct
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgpack
import pytest
import pytest_asyncio
from PIL import Image
from pydantic import ValidationError

from sie.server.app import create_app
from sie.settings.server import Settings
from tests import builders
from tests.e2e.conftest import tiny_bert_dir
from tests.inprocess import rss_mib, served

CLIP = "test/clip"
ENCODE = f"/v1/encode/{CLIP}"
MSGPACK = {"content-type": "application/msgpack", "accept": "application/msgpack"}
BODY_LIMIT = 34 * 1024 * 1024  # SIE_MAX_REQUEST_BODY_BYTES' default
READS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _png(width: int, height: int, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A single-colour PNG written without a canvas: the first row as is, every other row filtered
    'Up' (all zeros), so the compressor only ever holds one row."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    compressor = zlib.compressobj(9)
    first = b"\x00" + bytes(rgb) * width
    rest = b"\x02" + bytes(3 * width)
    idat = [compressor.compress(first)] + [compressor.compress(rest) for _ in range(height - 1)]
    idat.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"".join(idat)) + chunk(b"IEND", b"")
    )


def _psd(width: int = 8, height: int = 8) -> bytes:
    """A raw RGB Photoshop file (Pillow reads PSD but cannot write it)."""
    header = b"8BPS" + struct.pack(">H6xHIIHH", 1, 3, height, width, 8, 3)
    return header + struct.pack(">III", 0, 0, 0) + struct.pack(">H", 0) + bytes(3 * width * height)


def _saved(kind: str, size: tuple[int, int] = (48, 40)) -> bytes:
    image = Image.new("RGB", size, (20, 120, 220))
    out = io.BytesIO()
    image.save(out, format=kind)
    return out.getvalue()


def _body(*images: bytes) -> bytes:
    return bytes(msgpack.packb({"items": [{"images": [{"data": data}]} for data in images]}))


def _refused(response: httpx.Response) -> str:
    assert response.status_code == 400, f"{response.status_code} instead of 400"
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT"
    return str(detail["message"])


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sec-images")
    weights = builders.clip(tiny_bert_dir(), root / "clip")
    models = root / "models"
    models.mkdir()
    (models / "clip.yaml").write_text(
        f"""
sie_id: {CLIP}
weights_path: "{weights}"
inputs: {{text: true, image: true}}
tasks:
  encode:
    dense: {{dim: 16}}
max_sequence_length: 77
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie.adapters.clip:ClipEncoder"}}
"""
    )
    return models


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(models_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        models_dir=str(models_dir), preload_models=CLIP, hot_reload=False, default_compute_precision="float32"
    )
    async with served(create_app(settings)) as client:
        yield client


async def _post(server: httpx.AsyncClient, body: bytes, within_s: float = 30) -> tuple[httpx.Response, float]:
    """The answer and how long it took; a server still decoding after ``within_s`` fails the test
    (before the budget, the bombs below took minutes)."""
    started = time.perf_counter()
    try:
        response = await asyncio.wait_for(server.post(ENCODE, content=body, headers=MSGPACK), within_s)
    except TimeoutError:
        pytest.fail(f"no answer within {within_s} s: the server is decoding the images")
    return response, time.perf_counter() - started


async def test_a_body_of_decompression_bombs_is_refused_from_the_headers(server: httpx.AsyncClient) -> None:
    """M6: 9,400 x 9,400 single-colour PNGs (under Pillow's own 89 MP warning), as many as the body
    limit holds (about 120; 31 GB of pixels decoded as RGB): 400 naming the per-image limit, in well
    under a second, and the process's memory does not move by more than the body's own copies."""
    bomb = _png(9400, 9400)
    assert len(bomb) < 300_000
    count = min(130, (BODY_LIMIT - 64 * 1024) // len(bomb))
    assert count >= 100
    body = _body(*[bomb] * count)
    rss = rss_mib()
    response, took = await _post(server, body)
    message = _refused(response)
    assert "SIE_MAX_IMAGE_PIXELS" in message and "40000000" in message and "9400x9400" in message
    assert took < 1.5, took
    assert rss_mib() - rss < 300


async def test_images_each_allowed_but_over_the_request_budget_are_refused(server: httpx.AsyncClient) -> None:
    """M6: eight 6,000 x 6,000 images pass the per-image maximum (36 MP each) but hold 288 MP together,
    over the request's 256 MP: refused before any is decoded, naming the request's limit."""
    image = _png(6000, 6000)
    response, took = await _post(server, _body(*[image] * 8))
    message = _refused(response)
    assert "SIE_MAX_REQUEST_PIXELS" in message and "256000000" in message
    assert took < 1.0, took


async def test_one_image_over_the_per_image_maximum_is_refused(server: httpx.AsyncClient) -> None:
    """M6: 7,000 x 7,000 (49 MP) is under Pillow's default but over the server's 40 MP per image."""
    response, _ = await _post(server, _body(_png(7000, 7000)))
    message = _refused(response)
    assert "7000x7000" in message and "SIE_MAX_IMAGE_PIXELS" in message


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_psd(), id="PSD"),
        pytest.param(_saved("EPS"), id="EPS"),
        pytest.param(_saved("PPM"), id="PPM"),
        pytest.param(_saved("TGA"), id="TGA"),
        pytest.param(_saved("ICO", (32, 32)), id="ICO"),
        pytest.param(_saved("PCX"), id="PCX"),
        pytest.param(_saved("SGI"), id="SGI"),
        pytest.param(_saved("IM"), id="IM"),
    ],
)
async def test_a_format_no_family_reads_is_refused(server: httpx.AsyncClient, data: bytes) -> None:
    """M6: Pillow opens each of these; the server reads only what the families take (and the SDK
    sends), so each is a 400 that lists those, and nothing is decoded by another plugin."""
    message = _refused((await _post(server, _body(data)))[0])
    assert "PNG, JPEG, WEBP, GIF, BMP or TIFF" in message, message


@pytest.mark.parametrize("kind", READS)
async def test_every_format_the_families_read_still_encodes(server: httpx.AsyncClient, kind: str) -> None:
    response, _ = await _post(server, _body(_saved(kind), _png(2000, 1500)))
    assert response.status_code == 200, response.text
    items = msgpack.unpackb(response.content)["items"]
    assert [item["dense"]["dims"] for item in items] == [16, 16]


async def test_requests_over_the_in_flight_budget_take_turns(models_dir: Path) -> None:
    """Four concurrent requests each as big as the whole in-flight budget (two 1,000 x 1,000 images,
    2 MP of a 2 MP budget): they wait their turn instead of decoding together, and each is answered
    with the vectors it gets alone."""
    settings = Settings(
        models_dir=str(models_dir),
        preload_models=CLIP,
        hot_reload=False,
        default_compute_precision="float32",
        max_image_pixels=1_000_000,
        max_request_pixels=2_000_000,
        max_inflight_pixels=2_000_000,
    )
    app = create_app(settings)
    bodies = [_body(_png(1000, 1000, (i, 0, 0)), _png(1000, 1000, (0, i, 0))) for i in range(4)]
    headers = {"content-type": "application/msgpack", "accept": "application/json"}
    async with served(app) as client:

        async def vectors(body: bytes) -> list[list[float]]:
            response = await client.post(ENCODE, content=body, headers=headers)
            assert response.status_code == 200, response.text
            return [item["dense"]["values"] for item in response.json()["items"]]

        alone = [await vectors(body) for body in bodies]
        together = await asyncio.wait_for(asyncio.gather(*(vectors(body) for body in bodies)), 30)
    for mine, theirs in zip(together, alone, strict=True):
        for got, expected in zip(mine, theirs, strict=True):
            assert got == pytest.approx(expected, abs=1e-5)


async def test_the_pixel_settings_nest_and_stay_under_pillows_ceiling() -> None:
    """Each limit is at most the next: an image over the request's budget could never be served,
    a request over the in-flight budget would wait forever."""
    settings = Settings()
    assert (settings.max_image_pixels, settings.max_request_pixels, settings.max_inflight_pixels) == (
        40_000_000,
        256_000_000,
        1_024_000_000,
    )
    with pytest.raises(ValidationError, match="max_image_pixels"):
        Settings(max_image_pixels=100_000_000)  # past Pillow's own ceiling (89 MP)
    with pytest.raises(ValidationError, match="SIE_MAX_REQUEST_PIXELS"):
        Settings(max_image_pixels=30_000_000, max_request_pixels=20_000_000)
    with pytest.raises(ValidationError, match="SIE_MAX_INFLIGHT_PIXELS"):
        Settings(max_request_pixels=300_000_000, max_inflight_pixels=200_000_000)
