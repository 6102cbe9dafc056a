"""CLIP and SigLIP against transformers' own processor and ``get_text_features`` / ``get_image_features``
on the same tiny weights (tests/builders.py): texts, PNG and JPEG images, alone and mixed in a batch."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import CLIPModel, CLIPProcessor, SiglipModel, SiglipProcessor

from sie.adapters.batch import ImageData
from sie.adapters.clip import ClipEncoder, DualEncoder, SiglipEncoder
from sie.adapters.contract import Forward, LoadSpec
from sie.core.options import Capability, ComputePrecision, OverflowPolicy
from sie.core.task import UnsupportedInput
from sie.engine.runner import BatchGroup, ModelRunner
from sie.postprocess.outputs import Postprocess
from tests import builders

DENSE = Forward(frozenset({Capability.DENSE}))
TEXTS = ["a photo of a cat", "A Photo, of the lazy DOG!", "red car " * 60, "tree"]


def image_bytes(kind: str, size: tuple[int, int] = (40, 56), mode: str = "RGB", seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    image = Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)
    out = io.BytesIO()
    image.save(out, format=kind)
    return out.getvalue()


IMAGES = {
    "png": image_bytes("PNG"),
    "jpeg": image_bytes("JPEG", (64, 48), seed=1),
    "png-gray": image_bytes("PNG", (33, 33), "L", seed=2),
    "png-rgba": image_bytes("PNG", (50, 30), "RGBA", seed=3),
}


class Reference:
    """transformers' processor and model on the folder, as a user of the library would call them."""

    def __init__(
        self, folder: Path, model_class: Any, processor_class: Any, text_kwargs: dict[str, Any]
    ) -> None:
        self.model = model_class.from_pretrained(str(folder)).eval()
        self.processor = processor_class.from_pretrained(str(folder))
        self.text_kwargs = text_kwargs

    def texts(self, texts: list[str]) -> np.ndarray:
        inputs = self.processor(text=texts, return_tensors="pt", truncation=True, **self.text_kwargs)
        with torch.inference_mode():
            return self.model.get_text_features(**inputs).pooler_output.numpy()

    def images(self, data: list[bytes]) -> np.ndarray:
        pictures = [Image.open(io.BytesIO(one)) for one in data]
        inputs = self.processor(images=pictures, return_tensors="pt")
        with torch.inference_mode():
            return self.model.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output.numpy()


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory, splade_dir: Path) -> Path:
    return builders.clip(splade_dir, tmp_path_factory.mktemp("clip"))


@pytest.fixture(scope="module")
def siglip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.siglip(tmp_path_factory.mktemp("siglip"))


def spec(folder: Path, max_length: int) -> LoadSpec:
    return LoadSpec(
        weights=folder, device="cpu", precision=ComputePrecision.FLOAT32, max_seq_length=max_length
    )


@pytest.fixture(scope="module", params=["clip", "siglip"])
def pair(request: pytest.FixtureRequest, clip_dir: Path, siglip_dir: Path) -> tuple[DualEncoder, Reference]:
    if request.param == "clip":
        return ClipEncoder.load(spec(clip_dir, 77)), Reference(
            clip_dir, CLIPModel, CLIPProcessor, {"padding": True}
        )
    reference = Reference(
        siglip_dir, SiglipModel, SiglipProcessor, {"padding": "max_length", "max_length": 64}
    )
    return SiglipEncoder.load(spec(siglip_dir, 64)), reference


def embed(adapter: DualEncoder, inputs: list[str | ImageData]) -> np.ndarray:
    dense = adapter.run(adapter.prepare(inputs, DENSE), DENSE).dense
    assert dense is not None
    return dense


def test_declares_both_modalities_and_the_projection_width(pair: tuple[DualEncoder, Reference]) -> None:
    adapter, reference = pair
    assert {m.value for m in adapter.inputs} == {"text", "image"}
    assert adapter.capabilities == frozenset({Capability.DENSE})
    assert (
        adapter.dims[Capability.DENSE]
        == reference.texts(["x"]).shape[1]
        == reference.images([IMAGES["png"]]).shape[1]
    )


def test_texts_equal_transformers(pair: tuple[DualEncoder, Reference]) -> None:
    adapter, reference = pair
    np.testing.assert_allclose(embed(adapter, list(TEXTS)), reference.texts(TEXTS), atol=1e-5, rtol=0)
    for text in TEXTS:  # alone, so the batch's padding cannot hide a difference
        np.testing.assert_allclose(embed(adapter, [text]), reference.texts([text]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", sorted(IMAGES))
def test_each_image_equals_transformers(pair: tuple[DualEncoder, Reference], kind: str) -> None:
    adapter, reference = pair
    ours = embed(adapter, [ImageData(IMAGES[kind], kind.split("-")[0])])
    np.testing.assert_allclose(ours, reference.images([IMAGES[kind]]), atol=1e-5, rtol=0)


def test_a_mixed_batch_comes_back_in_batch_order(pair: tuple[DualEncoder, Reference]) -> None:
    adapter, reference = pair
    kinds = sorted(IMAGES)
    inputs: list[str | ImageData] = [TEXTS[0], ImageData(IMAGES[kinds[0]]), TEXTS[1], TEXTS[2]]
    inputs += [ImageData(IMAGES[k]) for k in kinds[1:]] + [TEXTS[3]]
    expected_texts = reference.texts(TEXTS)
    expected_images = reference.images([IMAGES[k] for k in kinds])
    texts, images = list(expected_texts), list(expected_images)
    expected = np.stack([texts[0], images[0], texts[1], texts[2], *images[1:], texts[3]])
    np.testing.assert_allclose(embed(adapter, inputs), expected, atol=1e-5, rtol=0)


def test_the_engine_runner_chunks_a_mixed_batch_by_cost(pair: tuple[DualEncoder, Reference]) -> None:
    """The worker's path: cost-sorted items, cut into padded-cost chunks, each run once per tower."""
    adapter, reference = pair
    prepared = adapter.prepare([*TEXTS, *(ImageData(IMAGES[k]) for k in sorted(IMAGES))], DENSE)
    order = sorted(range(len(prepared)), key=lambda i: prepared[i].cost)
    post = Postprocess(keep=frozenset({Capability.DENSE}), normalize=False)
    items, _, _ = ModelRunner(adapter, max_tokens=64).run(
        [prepared[i] for i in order], [BatchGroup(DENSE, post)] * len(order)
    )
    expected = np.concatenate([reference.texts(TEXTS), reference.images([IMAGES[k] for k in sorted(IMAGES)])])
    got = np.stack([items[order.index(i)].dense for i in range(len(prepared))])
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_costs_are_tokens_for_texts_and_patches_for_images(pair: tuple[DualEncoder, Reference]) -> None:
    adapter, _ = pair
    text, image = adapter.prepare(["a photo of a cat", ImageData(IMAGES["png"])], DENSE)
    patches = (32 // 8) ** 2
    assert image.cost == (patches + 1 if isinstance(adapter, ClipEncoder) else patches)
    assert text.cost == (len(text.ids) if isinstance(adapter, ClipEncoder) else 64)


@pytest.mark.parametrize(
    "data",
    [b"not an image at all", b"", IMAGES["png"][:60], b"\x89PNG\r\n\x1a\n" + b"\x00" * 40],
    ids=["text", "empty", "truncated-png", "png-magic-only"],
)
def test_bytes_that_are_not_an_image_are_refused(pair: tuple[DualEncoder, Reference], data: bytes) -> None:
    adapter, _ = pair
    with pytest.raises(UnsupportedInput, match=r"[Ii]mage"):
        adapter.prepare(["fine", ImageData(data, "png")], DENSE)


def test_pairs_are_refused(pair: tuple[DualEncoder, Reference]) -> None:
    adapter, _ = pair
    with pytest.raises(UnsupportedInput, match="not pairs"):
        adapter.prepare([("query", "document")], DENSE)


def test_a_decompression_bomb_is_refused_from_its_header(pair: tuple[DualEncoder, Reference]) -> None:
    adapter, _ = pair
    out = io.BytesIO()
    Image.new("1", (12_000, 12_000)).save(out, format="PNG")  # 144 MP, a few KB of file
    with pytest.raises(UnsupportedInput, match="larger than"):
        adapter.prepare([ImageData(out.getvalue())], DENSE)


def test_open_clip_checkpoints_are_refused_at_load(siglip_dir: Path) -> None:
    bad = LoadSpec(siglip_dir, "cpu", ComputePrecision.FLOAT32, 64, loadtime={"backend": "open_clip"})
    with pytest.raises(ValueError, match="open_clip"):
        SiglipEncoder.load(bad)


def test_token_ids_decode_for_openai_inputs(pair: tuple[DualEncoder, Reference]) -> None:
    adapter, _ = pair
    ids = adapter.prepare(["a photo of a cat"], DENSE)[0].ids
    assert adapter.tokenizer.decode(ids.tolist()) == "a photo of a cat"
    assert adapter.tokenizer.vocab_size > int(ids.max())


def test_overflow_policy_error_refuses_a_text_past_the_window(pair: tuple[DualEncoder, Reference]) -> None:
    """``error`` refuses the long text alone (its whole length, by the model's tokenizer); a text and an
    image beside it are prepared as by default; ``truncate_text`` embeds what ``default`` embeds."""
    adapter, reference = pair
    window = 77 if isinstance(adapter, ClipEncoder) else 64
    long = TEXTS[2]
    tokens = len(reference.processor.tokenizer(long)["input_ids"])
    assert tokens > window
    inputs: list[str | ImageData] = ["a photo of a cat", long, ImageData(IMAGES["png"])]
    error, truncate = (
        replace(DENSE, overflow=p) for p in (OverflowPolicy.ERROR, OverflowPolicy.TRUNCATE_TEXT)
    )
    refused = adapter.prepare(inputs, error)
    assert [item.error is None for item in refused] == [True, False, True]
    assert refused[1].error is not None and refused[1].error.code == "INPUT_TOO_LONG"
    assert refused[1].error.message.startswith(
        f"The input takes {tokens} tokens, past the model's {window}-token window"
    )
    by_default = embed(adapter, inputs)
    truncated = adapter.run(adapter.prepare(inputs, truncate), truncate).dense
    np.testing.assert_array_equal(truncated, by_default)
    kept = [refused[0], refused[2]]
    np.testing.assert_allclose(adapter.run(kept, error).dense, by_default[[0, 2]], atol=1e-6, rtol=0)
