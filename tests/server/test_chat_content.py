"""How a chat message's content reaches the model's template: text parts joined, except parts that
carry language codes, which a template such as TranslateGemma's reads from the part itself, and
messages with images, whose parts become the template's image placeholders."""

from __future__ import annotations

import base64

import msgspec
import pytest
from transformers import AutoTokenizer

from sie.catalog.errors import InvalidInput
from sie.server.api.openai_generate import MAX_CHAT_IMAGES, _messages
from sie.wire.generation import ChatCompletionRequest
from tests.e2e.conftest import tiny_bert_dir

# The request layout of TranslateGemma's model card, read by a template that, like its own, takes the
# codes and the text from the user turn's one part.
TRANSLATE = {
    "model": "google/translategemma-4b-it",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "source_lang_code": "cs", "target_lang_code": "de-DE", "text": "Dobrý den"}
            ],
        }
    ],
}
TEMPLATE = (
    "{% for m in messages %}{% set part = m['content'][0] %}"
    "Translate {{ part['source_lang_code'] }} to {{ part['target_lang_code'] }}: {{ part['text'] }}"
    "{% endfor %}"
)


def test_parts_with_language_codes_reach_the_template_as_parts() -> None:
    body = msgspec.json.decode(msgspec.json.encode(TRANSLATE), type=ChatCompletionRequest)
    messages, images = _messages(body.messages)
    assert images == ()
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Dobrý den", "source_lang_code": "cs", "target_lang_code": "de-DE"}
            ],
        }
    ]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir()))
    rendered = tokenizer.apply_chat_template(messages, chat_template=TEMPLATE, tokenize=False)
    assert rendered == "Translate cs to de-DE: Dobrý den"


def test_plain_text_parts_are_joined_as_before() -> None:
    plain = {
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ],
    }
    body = msgspec.json.decode(msgspec.json.encode(plain), type=ChatCompletionRequest)
    assert _messages(body.messages) == ([{"role": "user", "content": "ab"}], ())


def _image_part(payload: bytes) -> dict[str, object]:
    return {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(payload).decode()},
    }


def test_image_parts_become_the_templates_placeholders_and_their_bytes_go_in_order() -> None:
    chat = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [_image_part(b"first"), {"type": "text", "text": "and"}, _image_part(b"2nd")],
            },
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": [{"type": "text", "text": "a third:"}, _image_part(b"third")]},
        ],
    }
    body = msgspec.json.decode(msgspec.json.encode(chat), type=ChatCompletionRequest)
    messages, images = _messages(body.messages)
    assert [m["content"] for m in messages] == [
        [{"type": "image"}, {"type": "text", "text": "and"}, {"type": "image"}],
        "two",
        [{"type": "text", "text": "a third:"}, {"type": "image"}],
    ]
    assert [(i.data, i.format) for i in images] == [(b"first", "png"), (b"2nd", "png"), (b"third", "png")]


def test_more_images_than_a_chat_may_carry_are_refused() -> None:
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": [_image_part(b"x")] * (MAX_CHAT_IMAGES + 1)}],
    }
    body = msgspec.json.decode(msgspec.json.encode(chat), type=ChatCompletionRequest)
    with pytest.raises(InvalidInput, match=f"at most {MAX_CHAT_IMAGES} images"):
        _messages(body.messages)
