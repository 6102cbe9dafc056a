"""Causal-LM rerankers against their references, on small Qwen models built from configs.

mxbai-rerank-v2 is held to the ``mxbai-rerank`` library's recipe (``MxbaiRerankV2.prepare_inputs``
and ``forward``: ``query: ...``, a newline, ``document: ...`` cut to fit, a newline, the task prompt,
inside the chat turns; yes-minus-no at the last position), written out here on transformers because
the library itself (0.1.6) calls ``prepare_for_model``, which transformers 5 removed. Qwen3-Reranker
is held to its model card's recipe (the prompt tokenized with the chat prefix and suffix around it,
left padding, the log-softmax probability of "yes" against "no" at the last position). The packaged tiny BERT's tokenizer stands in for Qwen's:
it has the "yes", "no", "1" and "0" tokens, and both sides tokenize the same text with it.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from sie.adapters.causal_reranker import QWEN3_INSTRUCTION, CausalLmReranker
from sie.adapters.contract import Forward, LoadSpec
from sie.core.options import Capability, ComputePrecision, OverflowPolicy
from sie.core.task import Task
from tests import builders

SMALL = {
    "vocab_size": 30522,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
    "pad_token_id": 0,
    "tie_word_embeddings": False,
}
SCORE = Forward(frozenset({Capability.SCORE}))
WORDS = [
    "blood",
    "pressure",
    "salt",
    "stress",
    "kidney",
    "heart",
    "genetics",
    "bananas",
    "yellow",
    "answer",
    "query",
    "the",
    "of",
]
QUERY = "what causes high blood pressure"


def documents(n: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 150))) for _ in range(n)] + ["ok"]


def hf_tokenizer(folder: Path) -> PreTrainedTokenizerFast:
    """The folder's tokenizer.json as transformers runs it (AutoTokenizer would pick Qwen's slow
    class from the model config and read the file differently), padded on the left."""
    return PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"), pad_token="[PAD]", padding_side="left"
    )


def build(model: torch.nn.Module, tiny_bert: Path, folder: Path) -> Path:
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_bert / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def qwen2_folder(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return build(Qwen2ForCausalLM(Qwen2Config(**SMALL)), splade_dir, tmp_path_factory.mktemp("mxbai"))


@pytest.fixture(scope="module")
def qwen3_folder(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.qwen3_reranker(splade_dir, tmp_path_factory.mktemp("qwen3-reranker"))


def ours(folder: Path, loadtime: dict[str, object], docs: list[str], length: int = 512) -> np.ndarray:
    reranker = CausalLmReranker.load(
        LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, length, loadtime=loadtime)
    )
    pairs = [(QUERY, doc) for doc in docs]
    scores = reranker.run(reranker.prepare(pairs, SCORE), SCORE).scores
    assert scores is not None
    alone = [reranker.run(reranker.prepare([pair], SCORE), SCORE).scores for pair in pairs[:3]]
    np.testing.assert_allclose(np.concatenate(alone), scores[:3], atol=1e-5)  # alone equals in batch
    return scores


MXBAI_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
MXBAI_TASK = (
    "You are a search relevance expert who evaluates how well documents match search queries. For each "
    "query-document pair, carefully analyze the semantic relationship between them, then provide your "
    "binary relevance judgment (0 for not relevant, 1 for relevant).\nRelevance:"
)


def mxbai_reference(folder: Path, docs: list[str]) -> np.ndarray:
    tokenizer = hf_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prefix = ids(f"<|im_start|>system\n{MXBAI_SYSTEM}<|im_end|>\n<|im_start|>user\n")
    suffix, sep, task = ids("<|im_end|>\n<|im_start|>assistant\n"), ids("\n"), ids(MXBAI_TASK)
    budget = model.config.max_position_embeddings - (len(prefix) + len(task) + len(suffix) + len(sep))
    rows = []
    for doc in docs:
        query_ids = ids(f"query: {QUERY}")[:budget]
        doc_ids = ids(f"document: {doc}")[: budget - len(query_ids)]
        body = query_ids + (sep + doc_ids)[: budget - len(query_ids)]  # truncation="only_second"
        rows.append({"input_ids": prefix + body + sep + task + suffix})
    padded = tokenizer.pad(rows, padding="longest", return_tensors="pt")
    with torch.no_grad():
        logits = model(**padded).logits[:, -1, :]
    yes, no = ids("1")[0], ids("0")[0]
    return (logits[:, yes] - logits[:, no]).numpy()


def test_mxbai_equals_the_mxbai_rerank_recipe(qwen2_folder: Path) -> None:
    docs = [*documents(12), " ".join(["salt"] * 700)]  # the last one is cut to fit
    got = ours(qwen2_folder, {}, docs)  # mxbai's layout and score are the defaults
    np.testing.assert_allclose(got, mxbai_reference(qwen2_folder, docs), atol=1e-4, rtol=1e-4)
    assert np.ptp(got) > 1e-3  # the random head does not score every pair alike


def qwen3_reference(
    folder: Path, docs: list[str], max_length: int, instruction: str = QWEN3_INSTRUCTION
) -> np.ndarray:
    tokenizer = hf_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    prefix = (
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
        'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    )
    suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    prefix_ids = tokenizer.encode(prefix, add_special_tokens=False)
    suffix_ids = tokenizer.encode(suffix, add_special_tokens=False)
    texts = [f"<Instruct>: {instruction}\n<Query>: {QUERY}\n<Document>: {doc}" for doc in docs]
    inputs = tokenizer(
        texts,
        truncation="longest_first",
        max_length=max_length - len(prefix_ids) - len(suffix_ids),
        add_special_tokens=False,
        return_attention_mask=False,
    )
    inputs["input_ids"] = [prefix_ids + ids + suffix_ids for ids in inputs["input_ids"]]
    padded = tokenizer.pad(inputs, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**padded).logits[:, -1, :]
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    pair = torch.stack([logits[:, no], logits[:, yes]], dim=1)
    return torch.log_softmax(pair, dim=1)[:, 1].exp().numpy()


def test_qwen3_equals_the_model_cards_recipe(qwen3_folder: Path) -> None:
    docs = [*documents(12), " ".join(["kidney"] * 400)]
    loadtime = {"input_format": "qwen3", "yes_token": "yes", "no_token": "no", "score_mode": "log_softmax"}
    got = ours(qwen3_folder, loadtime, docs, length=256)
    np.testing.assert_allclose(got, qwen3_reference(qwen3_folder, docs, 256), atol=1e-5)
    assert ((got > 0) & (got < 1)).all() and np.ptp(got) > 1e-4


def test_a_single_text_or_an_unknown_layout_is_refused(qwen2_folder: Path) -> None:
    reranker = CausalLmReranker.load(LoadSpec(qwen2_folder, "cpu", ComputePrecision.FLOAT32, 512))
    with pytest.raises(Exception, match="pairs"):
        reranker.prepare(["just a text"], SCORE)
    with pytest.raises(ValueError, match="input_format"):
        CausalLmReranker.load(
            LoadSpec(qwen2_folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime={"input_format": "nope"})
        )


def test_qwen3_reads_the_requests_instruction_in_its_instruct_slot(qwen3_folder: Path) -> None:
    loadtime = {"input_format": "qwen3", "yes_token": "yes", "no_token": "no", "score_mode": "log_softmax"}
    reranker = CausalLmReranker.load(
        LoadSpec(qwen3_folder, "cpu", ComputePrecision.FLOAT32, 256, loadtime=loadtime)
    )
    docs = documents(5)
    forward = Forward(frozenset({Capability.SCORE}), task=Task(instruction="Find cardiology papers"))
    got = reranker.run(reranker.prepare([(QUERY, d) for d in docs], forward), forward).scores
    np.testing.assert_allclose(
        got, qwen3_reference(qwen3_folder, docs, 256, "Find cardiology papers"), atol=1e-5
    )


QWEN3 = {"input_format": "qwen3", "yes_token": "yes", "no_token": "no", "score_mode": "log_softmax"}


def whole_prompt(folder: Path, layout: str, document: str) -> int:
    """The tokens of the pair's prompt laid out whole, counted with transformers' tokenizer."""
    tokenizer = hf_tokenizer(folder)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    if layout == "qwen3":
        system = (
            "Judge whether the Document meets the requirements based on the Query and the Instruct "
            'provided. Note that the answer can only be "yes" or "no".'
        )
        body = f"<Instruct>: {QWEN3_INSTRUCTION}\n<Query>: {QUERY}\n<Document>: {document}"
        suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        return (
            count(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n") + count(body) + count(suffix)
        )
    prefix = f"<|im_start|>system\n{MXBAI_SYSTEM}<|im_end|>\n<|im_start|>user\n"
    fixed = count(prefix) + 2 * count("\n") + count(MXBAI_TASK) + count("<|im_end|>\n<|im_start|>assistant\n")
    return fixed + count(f"query: {QUERY}") + count(f"document: {document}")


@pytest.mark.parametrize("layout", ["mxbai", "qwen3"])
def test_overflow_policy_error_refuses_a_pair_its_prompt_would_cut(
    layout: str, qwen2_folder: Path, qwen3_folder: Path
) -> None:
    folder, loadtime, length = (qwen3_folder, QWEN3, 256) if layout == "qwen3" else (qwen2_folder, {}, 512)
    reranker = CausalLmReranker.load(
        LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, length, loadtime=loadtime)
    )
    long = " ".join(["salt"] * 700)
    pairs = [(QUERY, "salt and stress"), (QUERY, long)]
    error, truncate = (
        replace(SCORE, overflow=p) for p in (OverflowPolicy.ERROR, OverflowPolicy.TRUNCATE_TEXT)
    )
    refused = reranker.prepare(pairs, error)
    assert refused[0].error is None
    assert refused[1].error is not None and refused[1].error.code == "INPUT_TOO_LONG"
    tokens = whole_prompt(folder, layout, long)
    assert tokens > length
    assert refused[1].error.message.startswith(
        f"The input takes {tokens} tokens, past the model's {length}-token window"
    )
    by_default = reranker.run(reranker.prepare(pairs, SCORE), SCORE).scores
    assert by_default is not None
    np.testing.assert_array_equal(
        reranker.run(reranker.prepare(pairs, truncate), truncate).scores, by_default
    )
    # It fits whole: the same score, run alone instead of beside the cut pair (float32 noise of the
    # batch's padding, ~1e-8, is all that may differ).
    np.testing.assert_allclose(reranker.run(refused[:1], error).scores, by_default[:1], rtol=1e-5, atol=1e-6)
