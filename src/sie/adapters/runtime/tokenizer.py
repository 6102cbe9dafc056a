"""Fast tokenization with the model's own ``tokenizer.json``: truncation only, never padding.

Padding happens later, per sub-batch, so a short text never pays for a long neighbour. The Rust
tokenizer releases the GIL, which lets the preprocessing pool run beside the forward pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from sie.adapters.contract import LoadSpec


@dataclass(frozen=True, slots=True)
class TokenSpans:
    """One text's token ids, each token's ``[start, end)`` character offsets and its special-token flag."""

    ids: np.ndarray
    offsets: np.ndarray  # [tokens, 2] int64
    special: np.ndarray  # [tokens] bool


@dataclass(frozen=True, slots=True)
class PairSpans:
    """A (first, second) pair's ids and segment ids, each token's ``[start, end)`` character span in
    its own text, and which tokens are the second text's (the template's separators are neither's)."""

    ids: np.ndarray
    type_ids: np.ndarray
    offsets: np.ndarray  # [tokens, 2] int64
    second: np.ndarray  # [tokens] bool


@dataclass(frozen=True, slots=True)
class PairIds:
    """A (query, document) pair as a cross-encoder reads it: ids and segment ids, and ``content``,
    how many of the tokens are the two texts' own (the rest are the template's separators)."""

    ids: np.ndarray
    type_ids: np.ndarray
    content: int


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer, max_length: int | None) -> None:
        tokenizer.no_padding()
        if max_length:
            tokenizer.enable_truncation(max_length=max_length)
        else:
            tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self.max_length = max_length
        self.pad_id = self._pad_id(tokenizer)
        self._appended: int | None = None  # a token every text ends with (``ending_with``)
        self._whole: Tokenizer | None = None  # a copy that never truncates (``past_window``)
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)

    @classmethod
    def of(cls, spec: LoadSpec) -> TextTokenizer:
        """The tokenizer a model loads with: its own folder's (a YAML's ``tokenizer_id``) or the model's."""
        return cls.from_folder(spec.tokenizer_folder, spec.max_seq_length)

    @classmethod
    def from_folder(cls, folder: Path, max_length: int | None) -> TextTokenizer:
        path = folder / "tokenizer.json"
        if path.exists():
            return cls(Tokenizer.from_file(str(path)), max_length)
        return cls(_converted(folder), max_length)

    @staticmethod
    def _pad_id(tokenizer: Tokenizer) -> int:
        padding = tokenizer.padding
        if padding and "pad_id" in padding:
            return int(padding["pad_id"])
        for token in ("[PAD]", "<pad>", "<|endoftext|>"):
            token_id = tokenizer.token_to_id(token)
            if token_id is not None:
                return token_id
        return 0

    def encode(self, texts: list[str], special_tokens: bool = True) -> list[np.ndarray]:
        """Each text's ids; ``special_tokens=False`` leaves out the ones a single text gets (for
        families that lay out a prompt from pieces of their own)."""
        # The fast batch skips the character offsets nobody reads here (~10 % of the tokenizer's time).
        encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=special_tokens)
        if self._appended is None or not special_tokens:
            return [np.asarray(e.ids, dtype=np.int64) for e in encodings]
        return [np.asarray([*e.ids, self._appended], dtype=np.int64) for e in encodings]

    def ending_with(self, token_id: int) -> TextTokenizer:
        """A copy whose every text ends with ``token_id``, appended after truncating to one token less
        so a long text keeps it: the last-token pooled LLM embedders (e5-mistral, SFR-Embedding) were
        trained on an EOS their tokenizer does not add. Itself when the tokenizer adds it already."""
        if self._tokenizer.encode("a").ids[-1:] == [token_id]:
            return self
        copy = self.untruncated()
        copy.max_length = self.max_length
        if self.max_length:
            copy._tokenizer.enable_truncation(max_length=self.max_length - 1)
        copy._appended = token_id
        return copy

    def encode_pairs(self, pairs: list[tuple[str, str]]) -> list[PairIds]:
        """Each (query, document) pair joined with the model's separators and truncated (the longer
        side first) to the maximum length, as cross-encoders were trained."""
        encodings = self._tokenizer.encode_batch(pairs, add_special_tokens=True)
        return [
            PairIds(
                np.asarray(e.ids, dtype=np.int64),
                np.asarray(e.type_ids, dtype=np.int64),
                sum(sequence is not None for sequence in e.sequence_ids),
            )
            for e in encodings
        ]

    def encode_pair_spans(self, pairs: list[tuple[str, str]]) -> list[PairSpans]:
        """Each pair as ``encode_pairs`` joins it, with the spans that map the second text's tokens
        back onto it (a pruner's keep probabilities onto its passage). Which tokens are the second
        text's comes from the tokenizer, not from counting separators, which a text may contain."""
        encodings = self._tokenizer.encode_batch(pairs, add_special_tokens=True)
        return [
            PairSpans(
                np.asarray(e.ids, dtype=np.int64),
                np.asarray(e.type_ids, dtype=np.int64),
                np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2),
                np.asarray([sequence == 1 for sequence in e.sequence_ids], dtype=np.bool_),
            )
            for e in encodings
        ]

    def encode_spans(self, texts: list[str]) -> list[TokenSpans]:
        """Ids with each token's character span in its text and whether it is a special token, for the
        families that map token predictions back onto the text (token-classification NER)."""
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=True)
        return [
            TokenSpans(
                np.asarray(e.ids, dtype=np.int64),
                np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2),
                np.asarray(e.special_tokens_mask, dtype=np.bool_),
            )
            for e in encodings
        ]

    def past_window(self, inputs: Sequence[str | tuple[str, str]]) -> dict[int, int]:
        """The inputs (texts or pairs, as ``encode`` / ``encode_pairs`` take them) that do not fit the
        window whole: each one's index and its whole token count. Empty when the tokenizer has no
        window. Tokenizes a second time, so only a request that asked to be refused pays it."""
        if not self.max_length:
            return {}
        whole = self._whole
        if whole is None:  # a benign race: two threads may each build the same copy
            whole = self._whole = Tokenizer.from_str(self._tokenizer.to_str())
            whole.no_truncation()
        extra = 0 if self._appended is None else 1
        counts = (len(e.ids) + extra for e in whole.encode_batch_fast(list(inputs), add_special_tokens=True))
        return {i: count for i, count in enumerate(counts) if count > self.max_length}

    def untruncated(self) -> TextTokenizer:
        """A copy that never truncates (to count a long text's tokens whole); the original truncates."""
        return TextTokenizer(Tokenizer.from_str(self._tokenizer.to_str()), None)

    def truncating_first_only(self) -> TextTokenizer:
        """A copy that truncates only a pair's first text, never the second (an NLI hypothesis must
        stay whole, as transformers' zero-shot pipeline keeps it); the original keeps its strategy."""
        copy = self.untruncated()
        copy.max_length = self.max_length
        if self.max_length:
            copy._tokenizer.enable_truncation(max_length=self.max_length, strategy="only_first")
        return copy

    def token_id(self, token: str) -> int | None:
        found: int | None = self._tokenizer.token_to_id(token)
        return found

    def role_ids(self, folder: Path, roles: Iterable[str]) -> dict[str, int]:
        """The ids of the tokens ``tokenizer_config.json`` in ``folder`` names for ``roles``
        (``eos_token``, ``cls_token``...): a role it leaves out, or names a token this vocabulary lacks,
        is absent from the answer."""
        path = folder / "tokenizer_config.json"
        config = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        ids = {}
        for role in roles:
            token = config.get(role)
            if isinstance(token, dict):
                token = token.get("content")
            if isinstance(token, str) and (token_id := self.token_id(token)) is not None:
                ids[role] = token_id
        return ids

    def special_ids(self) -> frozenset[int]:
        """Ids of the tokens the tokenizer marks special ([CLS], <s>, padding, ...)."""
        return frozenset(
            token_id
            for token_id, added in self._tokenizer.get_added_tokens_decoder().items()
            if added.special
        )

    def vocabulary(self) -> dict[str, int]:
        vocab: dict[str, int] = self._tokenizer.get_vocab(with_added_tokens=True)
        return vocab

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)


def _converted(folder: Path) -> Tokenizer:
    """The fast tokenizer transformers builds from a folder that ships only the slow tokenizer's files
    (a SentencePiece ``spm.model`` as DeBERTa-v3's repositories, a ``vocab.txt``): the same conversion
    transformers' own pipelines run on it."""
    from transformers import AutoTokenizer  # only here: most folders carry tokenizer.json

    try:
        loaded = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise FileNotFoundError(
            f"{folder} has no tokenizer.json and transformers cannot build one: {exc}"
        ) from exc
    backend = getattr(loaded, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise FileNotFoundError(f"{folder} has no tokenizer.json and its tokenizer has no fast form")
    return backend
