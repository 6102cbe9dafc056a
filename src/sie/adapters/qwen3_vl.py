"""Qwen3-VL's chat VLM read by a retrieval family (its embedder and its reranker): what both share.

An item becomes a conversation (a system turn, a user turn of images and texts), rendered by the
checkpoint's own chat template with the assistant turn opened, and read by transformers'
``Qwen3VLProcessor``: the images' pixels, their grids, and the prompt with each image placeholder
expanded to its merged patches. The processor runs once per item in ``prepare`` (the CPU pool); a batch
is then only padding on the left, so the last position of every row is its last real token, and
concatenated pixels: an item's tensors never depend on what it is batched with.

The processor is built from its parts: the tokenizer, Qwen2-VL's PIL image processor (transformers'
default one needs torchvision, which is not installed) with the public server's bounds of 256 to 1280
patches of 28 pixels' area (``loadtime.min_pixels`` and ``max_pixels`` change them), and the chat
template (``chat_template.jinja`` or ``chat_template.json``, else the tokenizer's). Its video processor
is a placeholder; no video reaches it. Each image is resized alone, as the processor treats a list.

A text that would take the prompt past the model's length is cut at a token boundary (the text alone:
the template and the images are never cut); a prompt whose fixed parts alone do not fit is refused.
Under ``options.overflow_policy: error`` a prompt that would be cut is refused instead
(``INPUT_TOO_LONG``, that item's alone), its whole length against the model's.
Only the tokenizer's calls take a lock (a fast tokenizer is one object shared by the pool's threads);
images are resized outside it. ``prepare`` always runs on the pool: a chat template and a tokenizer
call cost milliseconds, too much for the event loop.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, Self

import torch
import transformers
from PIL import Image
from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
from transformers.models.auto.image_processing_auto import AutoImageProcessor

from sie.adapters.batch import ImageData, Prepared
from sie.adapters.clip import TokenizerVocabulary
from sie.adapters.contract import Forward, LoadSpec, Trait
from sie.adapters.runtime.images import decode_image
from sie.adapters.runtime.peft_checkpoints import load_with_lora
from sie.adapters.runtime.transformer import DeviceModel
from sie.adapters.runtime.window import refusal
from sie.core.extraction import ItemError
from sie.core.options import Modality
from sie.core.task import UnsupportedInput

# The public server's bounds on an image's area (the model cards use 4 to 1800 patches of 32 pixels);
# ``loadtime.min_pixels`` / ``max_pixels`` choose others.
MIN_PIXELS: Final = 256 * 28 * 28
MAX_PIXELS: Final = 1280 * 28 * 28
# Qwen2-VL's image processor refuses images whose sides differ by more than this (smart_resize).
MAX_ASPECT: Final = 200
# The chat template's turn markers: in a text they would end its turn early. Other special tokens (an
# ``<|endoftext|>`` a document quotes) are read as the tokenizer reads them, as transformers does.
TURN_MARKERS: Final = ("<|im_start|>", "<|im_end|>")
# No length cap of the model's own: 2**31 tokens is past any prompt.
UNBOUNDED: Final = 2**31

# A conversation as the chat template reads it: role and content parts ({"type": "text", "text": ...}
# or {"type": "image", "image": <PIL image>}).
Conversation = list[dict[str, Any]]


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def image_part(image: Image.Image) -> dict[str, Any]:
    return {"type": "image", "image": image}


def page(image: ImageData, family: str) -> Image.Image:
    """The client's image decoded as RGB, refused when the processor could not resize it."""
    decoded = decode_image(image).convert("RGB")
    if max(decoded.size) > MAX_ASPECT * min(decoded.size):
        raise UnsupportedInput(
            f"{family} reads images whose sides differ by at most {MAX_ASPECT} times; "
            f"this one is {decoded.width}x{decoded.height}"
        )
    return decoded


def chat_template_of(folder: Path, tokenizer: Any) -> str:
    """The chat template a processor of ``folder`` renders with: its own file, else the tokenizer's."""
    jinja, packed = folder / "chat_template.jinja", folder / "chat_template.json"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    if packed.is_file():
        return str(json.loads(packed.read_text(encoding="utf-8"))["chat_template"])
    if isinstance(tokenizer.chat_template, str):
        return tokenizer.chat_template
    raise ValueError(f"{folder} has no chat template (chat_template.jinja or chat_template.json)")


def load_processor(
    images_folder: Path, tokenizer_folder: Path, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS
) -> Qwen3VLProcessor:
    """The processor from its parts: the image processor and chat template of ``images_folder``, the
    tokenizer of ``tokenizer_folder`` (the reranker's repository ships its tokenizer alone)."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    tokenizer.padding_side = "left"
    images = AutoImageProcessor.from_pretrained(  # type: ignore[no-untyped-call]
        str(images_folder), backend="pil", min_pixels=min_pixels, max_pixels=max_pixels
    )
    videos = object.__new__(transformers.BaseVideoProcessor)  # a placeholder: no video reaches it
    return Qwen3VLProcessor(  # type: ignore[no-untyped-call]
        image_processor=images,
        tokenizer=tokenizer,
        video_processor=videos,
        chat_template=chat_template_of(images_folder, tokenizer),
    )


@dataclass(frozen=True)
class ItemTensors:
    """One item as the processor gave it: its token ids (image placeholders expanded), its modality
    map, its images' pixels and grids (None for a text), and the text it read (cut to fit)."""

    input_ids: torch.Tensor  # [tokens]
    mm_token_type_ids: torch.Tensor  # [tokens]
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    text: str


@dataclass(frozen=True)
class Picture:
    """One image as the processor reads it: its patches, its grid, its expanded placeholder."""

    pixel_values: torch.Tensor
    grid: torch.Tensor  # [1, 3]: temporal, height and width patches
    replacement: str


class ChatVlm:
    """The processor of a loaded Qwen3-VL: reads one item at a time. An item's images are resized and
    normalised once, outside any lock (the image processor keeps no state); only the tokenizer's
    calls are serialised. A text that holds one of the model's control tokens (a vision placeholder,
    a turn marker) is refused: placed in a prompt it would stand for pixels that are not there, or
    end a turn early."""

    def __init__(self, processor: Qwen3VLProcessor, family: str) -> None:
        self.processor = processor
        self.tokenizer: Any = processor.tokenizer
        self._family = family
        self._lock = threading.Lock()
        markers = ("image_token", "video_token", "vision_start_token", "vision_end_token")
        placeholders = {getattr(processor, name, None) for name in markers}
        known = {str(token.content) for token in self.tokenizer.added_tokens_decoder.values()}
        turns = {token for token in TURN_MARKERS if token in known}
        self._reserved = tuple(sorted(str(token) for token in placeholders | turns if token))

    def read(
        self,
        conversation: Callable[[str], Conversation],
        cut: str,
        pictures: Sequence[Picture],
        limit: int,
        forward: Forward,
    ) -> ItemTensors | ItemError:
        """``conversation(text)`` read by the processor with the ``pictures`` of its images (in the
        order its image parts come), where ``cut`` is the text cut at a token boundary, as little as
        needed, for the prompt to fit ``limit`` tokens; the item's refusal instead of a cut when
        ``forward`` asks for one (``overflow_policy: error``)."""
        replacements = [picture.replacement for picture in pictures]
        ids = self._ids(conversation(cut), replacements)
        over = len(ids) - limit
        if refused := refusal(forward, len(ids), limit):
            return refused
        if over > 0:
            with self._lock:
                offsets = self.tokenizer(cut, add_special_tokens=False, return_offsets_mapping=True)
            ends = [int(end) for _, end in offsets["offset_mapping"]]
            keep = len(ends) - over
            while keep > 0:  # a cut text may tokenize differently inside the template: shorten until it fits
                ids = self._ids(conversation(cut[: ends[keep - 1]]), replacements)
                if len(ids) <= limit:
                    cut = cut[: ends[keep - 1]]
                    break
                keep -= 1
            else:
                raise UnsupportedInput(
                    f"{self._family}'s template, images and the text it cannot cut take more than the "
                    f"model's {limit} tokens; send a shorter query, or smaller or fewer images"
                )
        types = self.processor.create_mm_token_type_ids([ids])[0]
        return ItemTensors(
            torch.tensor(ids, dtype=torch.long),
            torch.tensor(types, dtype=torch.long),
            torch.cat([picture.pixel_values for picture in pictures]) if pictures else None,
            torch.cat([picture.grid for picture in pictures]) if pictures else None,
            cut,
        )

    def count(self, text: str, special_tokens: bool = True) -> int:
        """``text``'s tokens alone (no template, no image), with the special tokens the tokenizer adds
        to a text unless ``special_tokens`` is False (a part inside a prompt has none): what ``usage``
        bills of the caller's text. Qwen's own tokenizer adds none either way."""
        if not text:
            return 0
        with self._lock:
            return len(self.tokenizer(text, add_special_tokens=special_tokens)["input_ids"])

    def picture(self, image: Image.Image) -> Picture:
        """One image resized and cut into patches (each image alone, as the processor treats a list),
        with its placeholder expanded to its merged patches; outside the lock. A caller reading one
        image in several prompts (a reranker's query) keeps its picture and reads it once."""
        pixels = self.processor.image_processor(images=[image], return_tensors="pt")
        replacement = str(self.processor.replace_image_token(pixels, image_idx=0))
        return Picture(pixels["pixel_values"], pixels["image_grid_thw"], replacement)

    def _ids(self, conversation: Conversation, replacements: list[str]) -> list[int]:
        """The rendered prompt's token ids, each image placeholder expanded, as the processor does."""
        for turn in conversation:
            for part in turn["content"]:
                found = part["type"] == "text" and next(
                    (t for t in self._reserved if t in part["text"]), None
                )
                if found:
                    raise UnsupportedInput(
                        f"{self._family} texts may not contain the model's control token {found}"
                    )
        prompt = self.processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        (expanded,), _ = self.processor.get_text_with_replacements([prompt], replacements)
        with self._lock:
            return [int(i) for i in self.tokenizer(expanded)["input_ids"]]


def collate(items: Sequence[ItemTensors], pad_id: int) -> dict[str, torch.Tensor]:
    """The batch's forward inputs: ids, attention and modality map padded on the left (the last
    position of every row is its last token), pixels and grids concatenated in item order."""
    width = max(len(item.input_ids) for item in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    types = torch.zeros((len(items), width), dtype=torch.long)
    for row, item in enumerate(items):
        length = len(item.input_ids)
        ids[row, width - length :] = item.input_ids
        mask[row, width - length :] = 1
        types[row, width - length :] = item.mm_token_type_ids
    inputs = {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types}
    pixels = [item.pixel_values for item in items if item.pixel_values is not None]
    grids = [item.image_grid_thw for item in items if item.image_grid_thw is not None]
    if pixels:
        inputs["pixel_values"] = torch.cat(pixels)
        inputs["image_grid_thw"] = torch.cat(grids)
    return inputs


class Qwen3VlFamily(DeviceModel):
    """What the embedder and the reranker share: the checkpoint loaded as
    ``Qwen3VLForConditionalGeneration`` with its base model kept on the device, the processor, the
    length a forward allows, and a batch's states after the final norm."""

    family: ClassVar[str]
    request_options: ClassVar[frozenset[str]] = frozenset()
    inputs = frozenset({Modality.TEXT, Modality.IMAGE})
    packs_tokens = False
    traits = frozenset({Trait.READS_IMAGE_TEXT, Trait.PREPARES_ON_POOL})

    def _load(self, spec: LoadSpec, processor_folder: Path) -> Any:
        """Loads the processor and the base model; the whole generator, for a family that reads its head."""
        dtype = self._place(spec)
        bounds = [
            spec.loadtime.get(key, default)
            for key, default in (("min_pixels", MIN_PIXELS), ("max_pixels", MAX_PIXELS))
        ]
        if (
            any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in bounds)
            or bounds[0] > bounds[1]
        ):
            raise ValueError(
                f"{self.family} min_pixels and max_pixels must be positive integers, min <= max: {bounds}"
            )
        processor = load_processor(processor_folder, spec.tokenizer_folder, *bounds)
        self._vlm = ChatVlm(processor, self.family)
        self.tokenizer = TokenizerVocabulary(self._vlm.tokenizer)
        self._pad = int(self._vlm.tokenizer.pad_token_id or 0)
        self._max_length = spec.max_seq_length or UNBOUNDED
        generator = load_with_lora(Qwen3VLForConditionalGeneration, spec, dtype, self.family)
        self.model = generator.model.to(self.device)  # the base model: its states after the final norm
        return generator

    @classmethod
    def load(cls, spec: LoadSpec) -> Self:
        return cls(spec)  # type: ignore[call-arg]  # each family's __init__ takes the spec

    def _limit(self, forward: Forward) -> int:
        return min(self._max_length, forward.max_length or UNBOUNDED)

    def _states(self, batch: Sequence[Prepared]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The batch's last hidden states and its inputs (run inside ``_running``)."""
        inputs = self._moved(collate([item.payload for item in batch], self._pad))
        return self.model(**inputs, use_cache=False).last_hidden_state, inputs

    def close(self) -> None:
        del self._vlm
        super().close()
