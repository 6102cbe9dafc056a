"""How a chat message's content reaches the model's template: text parts joined, except parts that
carry language codes, which a template such as TranslateGemma's reads from the part itself."""

from __future__ import annotations

import msgspec
from transformers import AutoTokenizer

from sie.server.api.openai_generate import _messages
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
    messages = _messages(body.messages)
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
    assert _messages(body.messages) == [{"role": "user", "content": "ab"}]
