"""Qwen3-VL-Embedding and Qwen3-VL-Reranker against their model cards' recipes run straight on
transformers (``Qwen3VLForConditionalGeneration`` and the processor's parts, each item or pair alone,
unpadded), on a tiny checkpoint built in the test (tests/builders.py). Ours batches texts, images and
images with captions together, padded on the left: each must equal the reference alone."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from PIL import Image
from transformers import (
    AutoTokenizer,
    Qwen2VLImageProcessorPil,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
)

from sie.adapters.batch import ImageData, MediaPair
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.qwen3_vl_embedding import Qwen3VlEmbedder
from sie.adapters.qwen3_vl_reranker import SYSTEM_PROMPT, Qwen3VlReranker
from sie.core.options import Capability, ComputePrecision, OverflowPolicy, Pooling
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.conftest import random_png

DENSE = Forward(frozenset({Capability.DENSE}))
SCORE = Forward(frozenset({Capability.SCORE}))
# Under, inside and over the public bounds of 256 and 1280 patches of 28 pixels' area.
PAGES = [random_png(300, 420, 0), random_png(64, 64, 1), random_png(1800, 1400, 2)]
TEXTS = ["a red bicycle", "quarterly revenue grew by ten percent across all regions", "ok"]
BASE_PROCESSOR = "Qwen/Qwen3-VL-2B-Instruct"


@pytest.fixture(scope="module")
def folder(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.qwen3_vl(splade_dir, tmp_path_factory.mktemp("qwen3-vl"))


@pytest.fixture(scope="module")
def reranker_folders(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The reranker's weights (no image processor, no chat template) and its base processor model's."""
    root = tmp_path_factory.mktemp("qwen3-vl-reranker")
    weights = builders.qwen3_vl(splade_dir, root / "reranker", processor=False)
    return weights, builders.qwen3_vl(splade_dir, root / "base")


@pytest.fixture(scope="module")
def embedder(folder: Path) -> Qwen3VlEmbedder:
    return Qwen3VlEmbedder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 32768))


def reranker_spec(folders: tuple[Path, Path], max_length: int = 32768) -> LoadSpec:
    weights, base = folders

    def fetch(hf_id: str, revision: str | None, path: str | None) -> Path:
        assert (hf_id, revision, path) == (BASE_PROCESSOR, "89644892", None)
        return base

    loadtime = {"base_processor_model": BASE_PROCESSOR, "base_processor_revision": "89644892"}
    return LoadSpec(weights, "cpu", ComputePrecision.FLOAT32, max_length, loadtime=loadtime, fetch=fetch)


@pytest.fixture(scope="module")
def reranker(reranker_folders: tuple[Path, Path]) -> Qwen3VlReranker:
    return Qwen3VlReranker.load(reranker_spec(reranker_folders))


class Reference:
    """The model card's recipe: the processor from its parts (transformers' ``AutoProcessor`` wants
    torchvision for the video side), the chat template rendered with the assistant turn opened, one
    item alone through ``Qwen3VLForConditionalGeneration``."""

    def __init__(self, folder: Path, processor_folder: Path) -> None:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        images = Qwen2VLImageProcessorPil.from_pretrained(
            str(processor_folder), min_pixels=256 * 28 * 28, max_pixels=1280 * 28 * 28
        )
        template = (processor_folder / "chat_template.jinja").read_text()
        videos = object.__new__(transformers.BaseVideoProcessor)
        self.processor = Qwen3VLProcessor(
            image_processor=images, tokenizer=tokenizer, video_processor=videos, chat_template=template
        )
        self.model = Qwen3VLForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32).eval()

    def inputs(self, conversation: list[dict[str, Any]]) -> Any:
        prompt = self.processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        images = [
            part["image"] for turn in conversation for part in turn["content"] if part["type"] == "image"
        ]
        return self.processor(text=[prompt], images=images or None, return_tensors="pt")

    def embedding(
        self, text: str | None, page: bytes | None, instruction: str, mean: bool = False
    ) -> np.ndarray:
        content: list[dict[str, Any]] = []
        if page is not None:
            content.append({"type": "image", "image": Image.open(io.BytesIO(page)).convert("RGB")})
        if text:
            content.append({"type": "text", "text": text})
        conversation = [
            {"role": "system", "content": [{"type": "text", "text": instruction}]},
            {"role": "user", "content": content},
        ]
        with torch.no_grad():
            hidden = self.model.model(**self.inputs(conversation)).last_hidden_state[0]
        pooled = hidden.mean(dim=0) if mean else hidden[-1]
        return torch.nn.functional.normalize(pooled, dim=-1).numpy()

    def score(
        self, query: tuple[str | None, bytes | None], document: tuple[str | None, bytes | None]
    ) -> float:
        content: list[dict[str, Any]] = [
            {"type": "text", "text": "<Instruct>: Retrieve relevant documents for the query."},
            {"type": "text", "text": "<Query>:"},
        ]
        for label, (text, page) in (("query", query), ("document", document)):
            if label == "document":
                content.append({"type": "text", "text": "\n<Document>:"})
            if page is not None:
                content.append({"type": "image", "image": Image.open(io.BytesIO(page)).convert("RGB")})
            if text:
                content.append({"type": "text", "text": text})
        conversation = [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {"role": "user", "content": content},
        ]
        tokenizer = self.processor.tokenizer
        yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
        with torch.no_grad():
            logits = self.model(**self.inputs(conversation)).logits[0, -1]
        return float(torch.sigmoid(logits[yes] - logits[no]))


@pytest.fixture(scope="module")
def reference(folder: Path) -> Reference:
    return Reference(folder, folder)


def normalized(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def embed(embedder: Qwen3VlEmbedder, inputs: list[Any], forward: Forward = DENSE) -> np.ndarray:
    dense = embedder.run(embedder.prepare(inputs, forward), forward).dense
    assert dense is not None
    return normalized(dense)


def test_texts_images_and_captioned_images_in_one_batch_equal_each_alone(
    embedder: Qwen3VlEmbedder, reference: Reference
) -> None:
    inputs: list[Any] = [TEXTS[0], ImageData(PAGES[0], "png"), TEXTS[1], ImageData(PAGES[1], "png", TEXTS[2])]
    inputs += [ImageData(PAGES[2], "png"), TEXTS[2]]
    items = [(TEXTS[0], None), (None, PAGES[0]), (TEXTS[1], None), (TEXTS[2], PAGES[1]), (None, PAGES[2])]
    items += [(TEXTS[2], None)]
    ours = embed(embedder, inputs)
    assert ours.shape == (6, embedder.dims[Capability.DENSE]) == (6, 64)
    for got, (text, page) in zip(ours, items, strict=True):
        want = reference.embedding(text, page, "Represent the user's input.")
        assert float(got @ want) >= 0.99999
        np.testing.assert_allclose(got, want, atol=2e-5)
    # Each alone gives what it gave in the batch; a caption moves its image's vector.
    for row in (0, 1, 3):
        np.testing.assert_allclose(embed(embedder, [inputs[row]])[0], ours[row], atol=2e-5)
    assert float(embed(embedder, [ImageData(PAGES[1], "png")])[0] @ ours[3]) < 0.999


def test_the_instruction_is_the_system_turn_shaped_as_the_model_card_shapes_it(
    embedder: Qwen3VlEmbedder, reference: Reference
) -> None:
    forward = Forward(frozenset({Capability.DENSE}), task=Task(instruction="  Find the matching product "))
    ours = embed(embedder, [TEXTS[0], ImageData(PAGES[0], "png")], forward)
    assert float(ours[0] @ reference.embedding(TEXTS[0], None, "Find the matching product.")) >= 0.99999
    assert float(ours[1] @ reference.embedding(None, PAGES[0], "Find the matching product.")) >= 0.99999
    punctuated = Forward(frozenset({Capability.DENSE}), task=Task(instruction="Which product is it?"))
    got = embed(embedder, [TEXTS[0]], punctuated)[0]
    assert float(got @ reference.embedding(TEXTS[0], None, "Which product is it?")) >= 0.99999
    assert float(got @ ours[0]) < 0.9999


def test_mean_pooling_and_the_pooling_it_refuses(embedder: Qwen3VlEmbedder, reference: Reference) -> None:
    forward = Forward(frozenset({Capability.DENSE}), pooling=Pooling.MEAN)
    ours = embed(embedder, [TEXTS[1], ImageData(PAGES[0], "png")], forward)
    assert (
        float(ours[0] @ reference.embedding(TEXTS[1], None, "Represent the user's input.", mean=True))
        >= 0.99999
    )
    assert (
        float(ours[1] @ reference.embedding(None, PAGES[0], "Represent the user's input.", mean=True))
        >= 0.99999
    )
    with pytest.raises(UnsupportedInput, match="last token or the mean"):
        embedder.prepare([TEXTS[0]], Forward(frozenset({Capability.DENSE}), pooling=Pooling.CLS))


def test_a_long_text_is_cut_to_fit_and_what_cannot_fit_is_refused(
    embedder: Qwen3VlEmbedder, reference: Reference
) -> None:
    words = " ".join(f"word{i}" for i in range(400))
    full = embedder.prepare([words], DENSE)[0]
    forward = Forward(frozenset({Capability.DENSE}), max_length=60)
    (cut,) = embedder.prepare([words], forward)
    assert len(full.ids) > 60 >= len(cut.ids) >= 58
    # The text kept is its first tokens, as many as the prompt left room for.
    (empty,) = embedder.prepare([""], DENSE)
    tokens = embedder._vlm.tokenizer(words, add_special_tokens=False, return_offsets_mapping=True)
    text = words[: tokens["offset_mapping"][len(cut.ids) - len(empty.ids) - 1][1]]
    assert 0 < len(text) < len(words)
    got = embed(embedder, [words], forward)[0]
    assert float(got @ reference.embedding(text, None, "Represent the user's input.")) >= 0.99999
    with pytest.raises(UnsupportedInput, match="take more than the model's 60 tokens"):
        embedder.prepare([ImageData(PAGES[0], "png")], forward)  # a page's patches alone pass 60 tokens
    with pytest.raises(UnsupportedInput, match="differ by at most 200 times"):
        embedder.prepare([ImageData(random_png(1000, 4, 3), "png")], DENSE)
    with pytest.raises(UnsupportedInput, match="not an image"):
        embedder.prepare([ImageData(b"not a png", "png")], DENSE)
    with pytest.raises(UnsupportedInput, match="embeds a text"):
        embedder.prepare([("a", "b")], DENSE)


@pytest.mark.parametrize("token", ["<|image_pad|>", "<|vision_start|>", "<|im_end|>"])
def test_a_text_holding_a_control_token_is_refused(
    embedder: Qwen3VlEmbedder, reranker: Qwen3VlReranker, token: str
) -> None:
    """An image placeholder in a text would stand for pixels that are not there (alone a meaningless
    vector, beside an image item a forward that fails the whole batch); a turn marker ends a turn."""
    texts: list[Any] = [f"a {token} b", ImageData(PAGES[1], "png", f"caption {token}")]
    for one in texts:
        with pytest.raises(UnsupportedInput, match="control token"):
            embedder.prepare([TEXTS[0], one], DENSE)
    instructed = Forward(frozenset({Capability.DENSE}), task=Task(instruction=f"Find {token}"))
    with pytest.raises(UnsupportedInput, match="control token"):
        embedder.prepare([TEXTS[0]], instructed)
    for pair in (MediaPair(f"q {token}", TEXTS[0]), MediaPair(TEXTS[0], ImageData(PAGES[1], "png", token))):
        with pytest.raises(UnsupportedInput, match="control token"):
            reranker.prepare([pair], SCORE)
    # Any other special token a document quotes is read as the tokenizer reads it, as transformers does.
    assert len(embedder.prepare(["the <|endoftext|> marker"], DENSE)) == 1


def test_the_image_area_bounds_are_load_options(folder: Path, embedder: Qwen3VlEmbedder) -> None:
    """The public server's bounds by default (a 64-pixel icon grows to 448 pixels a side, 256 patches
    of 28 pixels' area); the model cards' 4 to 1800 patches of 32 pixels when a profile asks."""
    loadtime = {"min_pixels": 4 * 32 * 32, "max_pixels": 1800 * 32 * 32}
    cards = Qwen3VlEmbedder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 32768, loadtime=loadtime))
    icon = ImageData(PAGES[1], "png")  # 64 x 64
    (ours,), (theirs,) = embedder.prepare([icon], DENSE), cards.prepare([icon], DENSE)
    assert ours.payload.image_grid_thw.tolist() == [[1, 28, 28]]  # 448 pixels a side, 16-pixel patches
    assert theirs.payload.image_grid_thw.tolist() == [[1, 4, 4]]  # 64 pixels a side
    assert len(ours.ids) - len(theirs.ids) == (28 * 28 - 4 * 4) // 4  # merged 2 x 2
    for wrong in ({"min_pixels": None}, {"min_pixels": 4096, "max_pixels": 1024}, {"max_pixels": True}):
        with pytest.raises(ValueError, match="min_pixels and max_pixels must be positive integers"):
            Qwen3VlEmbedder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime=wrong))


def test_reranker_pairs_of_texts_and_images_equal_each_pair_alone(
    reranker: Qwen3VlReranker, reranker_folders: tuple[Path, Path]
) -> None:
    weights, base = reranker_folders
    reference = Reference(weights, base)
    sides: list[tuple[str | None, bytes | None]] = [
        (TEXTS[0], None),
        (None, PAGES[0]),
        (TEXTS[1], None),
        (TEXTS[2], PAGES[1]),
    ]

    def side(text: str | None, page: bytes | None) -> str | ImageData:
        return ImageData(page, "png", text) if page is not None else str(text)

    pairs = [(query, document) for query in sides[:2] for document in sides]
    inputs = [MediaPair(side(*query), side(*document)) for query, document in pairs]
    scores = reranker.run(reranker.prepare(inputs, SCORE), SCORE).scores
    assert scores is not None and scores.shape == (len(pairs),)
    want = np.array([reference.score(query, document) for query, document in pairs])
    np.testing.assert_allclose(scores, want, atol=2e-6)
    assert float(np.ptp(want)) > 0.05  # the built model's answers differ from pair to pair
    # Plain text pairs (what a text-only client's request is) score as their MediaPair.
    alone = reranker.run(reranker.prepare([(TEXTS[0], TEXTS[1])], SCORE), SCORE).scores
    assert alone is not None and math.isclose(float(alone[0]), float(scores[2]), abs_tol=2e-6)


def test_a_query_image_shared_by_its_pairs_is_read_once(
    reranker: Qwen3VlReranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine hands every pair of a score request the same query object: its image is decoded
    and resized once for the batch, and the scores are those of pairs read apart."""
    # Image documents of one size: each is read as itself, never as another freed before it.
    documents: list[str | ImageData] = [TEXTS[0], ImageData(PAGES[1], "png"), TEXTS[1]]
    documents += [ImageData(random_png(64, 64, seed), "png") for seed in (7, 8)]
    apart = [MediaPair(ImageData(PAGES[0], "png"), document) for document in documents]
    want = reranker.run(reranker.prepare(apart, SCORE), SCORE).scores
    images = reranker._vlm.processor.image_processor
    resized: list[int] = []

    class Counted:
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            resized.append(len(kwargs["images"]))
            return images(*args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(images, name)

    monkeypatch.setattr(reranker._vlm.processor, "image_processor", Counted())
    query = ImageData(PAGES[0], "png")
    shared = [MediaPair(query, document) for document in documents]
    got = reranker.run(reranker.prepare(shared, SCORE), SCORE).scores
    assert got is not None and want is not None
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert resized == [1, 1, 1, 1]  # the query's image once, each image document once


def test_reranker_instruction_cut_document_and_refusals(
    reranker: Qwen3VlReranker, reranker_folders: tuple[Path, Path]
) -> None:
    instructed = Forward(frozenset({Capability.SCORE}), task=Task(instruction="Find pictures of bikes."))
    plain = reranker.run(reranker.prepare([MediaPair(TEXTS[0], TEXTS[1])], SCORE), SCORE).scores
    other = reranker.run(reranker.prepare([MediaPair(TEXTS[0], TEXTS[1])], instructed), instructed).scores
    assert plain is not None and other is not None and abs(float(plain[0]) - float(other[0])) > 1e-4
    document = " ".join(f"word{i}" for i in range(300))
    short = Forward(frozenset({Capability.SCORE}), max_length=80)
    (cut,) = reranker.prepare([MediaPair(TEXTS[0], document)], short)
    assert 78 <= len(cut.ids) <= 80
    # The document is cut, never the query or the template around it.
    (whole,) = reranker.prepare([MediaPair(TEXTS[0], "word0")], short)
    doc = reranker._vlm.tokenizer("word0", add_special_tokens=False)["input_ids"]
    start = next(i for i in range(len(whole.ids)) if list(whole.ids[i : i + len(doc)]) == doc)
    after = len(whole.ids) - start - len(doc)
    assert list(cut.ids[:start]) == list(whole.ids[:start])
    assert (
        list(cut.ids[-after:]) == list(whole.ids[-after:]) and after >= 3
    )  # <|im_end|>, <|im_start|>assistant
    with pytest.raises(UnsupportedInput, match="each have text or an image"):
        reranker.prepare([MediaPair(TEXTS[0], "   ")], SCORE)
    with pytest.raises(UnsupportedInput, match="pairs"):
        reranker.prepare([TEXTS[0]], SCORE)


def test_reranker_needs_its_base_processor_model_when_its_folder_has_no_processor(
    reranker_folders: tuple[Path, Path],
) -> None:
    weights, _ = reranker_folders
    with pytest.raises(ValueError, match="names no base_processor_model"):
        Qwen3VlReranker.load(LoadSpec(weights, "cpu", ComputePrecision.FLOAT32, 512))


def test_overflow_policy_error_refuses_a_prompt_it_would_cut(
    embedder: Qwen3VlEmbedder, reranker: Qwen3VlReranker
) -> None:
    """Embedder and reranker: ``error`` refuses the item whose prompt would be cut (its whole prompt's
    tokens against the length, here the request's), the others prepared as by default;
    ``truncate_text`` answers what ``default`` answers."""
    words = " ".join(f"word{i}" for i in range(300))
    for family, inputs, capability, length in (
        (embedder, [TEXTS[0], words], Capability.DENSE, 60),
        (reranker, [MediaPair(TEXTS[0], TEXTS[1]), MediaPair(TEXTS[0], words)], Capability.SCORE, 80),
    ):
        unbounded = Forward(frozenset({capability}))
        whole = len(family.prepare(inputs[1:], unbounded)[0].ids)
        assert whole > length
        default, truncate, error = (
            Forward(frozenset({capability}), max_length=length, overflow=policy) for policy in OverflowPolicy
        )
        refused = family.prepare(inputs, error)
        assert refused[0].error is None
        assert refused[1].error is not None and refused[1].error.code == "INPUT_TOO_LONG"
        assert refused[1].error.message.startswith(
            f"The input takes {whole} tokens, past the model's {length}-token window"
        )
        by_default = family.run(family.prepare(inputs, default), default)
        truncated = family.run(family.prepare(inputs, truncate), truncate)
        out = "dense" if capability is Capability.DENSE else "scores"
        np.testing.assert_array_equal(getattr(truncated, out), getattr(by_default, out))
        np.testing.assert_allclose(
            getattr(family.run(refused[:1], error), out), getattr(by_default, out)[:1], atol=1e-5, rtol=1e-5
        )


def test_an_item_bills_its_text_alone_as_the_public_server_counts_it(
    embedder: Qwen3VlEmbedder, folder: Path
) -> None:
    """``usage``: a text bills its own tokens as the tokenizer gives them (here a BERT tokenizer's,
    with [CLS] and [SEP]), not the instruction and template around it; an image bills no text (its
    placeholders are on ``images``), a captioned image its caption; cut at the model's length."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    inputs: list[Any] = [TEXTS[1], ImageData(PAGES[1], "png"), ImageData(PAGES[1], "png", text=TEXTS[0])]
    prepared = embedder.prepare(inputs, DENSE)
    own = [len(tokenizer(TEXTS[1]).input_ids), 0, len(tokenizer(TEXTS[0]).input_ids)]
    assert [item.input_tokens for item in prepared] == own
    assert all(len(item.ids) > billed for item, billed in zip(prepared, own, strict=True))
    assert len(prepared[1].ids) > 64  # the image's placeholders are in the prompt, not in the bill
    capped = Qwen3VlEmbedder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 60))
    words = " ".join(f"word{i}" for i in range(100))
    (long,) = capped.prepare([words], DENSE)
    assert len(tokenizer(words).input_ids) > 60 and long.input_tokens == 60 >= len(long.ids)


def test_reranker_bills_the_prompt_and_tells_the_callers_text_in_it(
    reranker: Qwen3VlReranker, reranker_folders: tuple[Path, Path]
) -> None:
    """``usage``: a pair bills its whole prompt, image placeholders included (the public server's
    count); its ``content`` is the query's text, the request's instruction (the default one is
    template) and the document's text as kept, each tokenized alone."""
    tokenizer = AutoTokenizer.from_pretrained(str(reranker_folders[0]))

    def alone(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    pairs = [
        MediaPair(TEXTS[0], TEXTS[1]),
        MediaPair(TEXTS[0], ImageData(PAGES[1], "png", text=TEXTS[2])),
        MediaPair(ImageData(PAGES[1], "png"), TEXTS[1]),
    ]
    prepared = reranker.prepare(pairs, SCORE)
    assert [item.content for item in prepared] == [
        alone(TEXTS[0]) + alone(TEXTS[1]),
        alone(TEXTS[0]) + alone(TEXTS[2]),
        alone(TEXTS[1]),
    ]
    assert all(item.input_tokens == len(item.ids) for item in prepared)
    assert len(prepared[1].ids) > len(prepared[0].ids) + 64  # the document's image is billed in the prompt
    instruction = "Find pictures of bikes."
    asked = Forward(frozenset({Capability.SCORE}), task=Task(instruction=instruction))
    (instructed,) = reranker.prepare(pairs[:1], asked)
    assert instructed.content == prepared[0].content + alone(instruction)
    words = " ".join(f"word{i}" for i in range(300))
    short = Forward(frozenset({Capability.SCORE}), max_length=80)
    (cut,) = reranker.prepare([MediaPair(TEXTS[0], words)], short)
    (bare,) = reranker.prepare([MediaPair(TEXTS[0], "word0")], short)  # the template around one token
    kept = len(cut.ids) - (len(bare.ids) - alone("word0"))
    assert 0 < kept < alone(words) and cut.content == alone(TEXTS[0]) + kept
