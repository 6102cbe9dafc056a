"""The packed BERT forward against the padded transformers forward on the same weights."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertModel,
    ElectraConfig,
    ElectraModel,
    RobertaConfig,
    RobertaModel,
    XLMRobertaConfig,
    XLMRobertaModel,
)

from sie.adapters.batch import Prepared, TokenBatch
from sie.adapters.contract import LoadSpec
from sie.adapters.dense_torch import TorchDenseEncoder
from sie.adapters.runtime.attention import (
    CPU_ALONE_FROM_TOKENS,
    CPU_BUCKET_CALL_COST,
    AttentionPlan,
    plan_attention,
)
from sie.adapters.runtime.packed_bert import BucketLayout, PackedBert, _onednn_linear, attention_buckets
from sie.adapters.runtime.packing import PackedTokens
from sie.adapters.runtime.pooling import pool, unpad
from sie.adapters.runtime.transformer import linear_weights_to
from sie.core.options import AttentionBackend, ComputePrecision, Pooling
from tests.adapters.test_dense_equivalence import corpus, cosine
from tests.conftest import dense


def tiny_bert(**overrides: object) -> BertModel:
    return tiny_encoder(BertConfig, BertModel, **overrides)


def tiny_encoder(config_class: Any, model_class: Any, **overrides: object) -> Any:
    """A seeded two-layer encoder of BERT's layout (BERT, RoBERTa, XLM-RoBERTa) without a pooler."""
    torch.manual_seed(0)
    dims: dict[str, object] = {"max_position_embeddings": 64, **overrides}
    config = config_class(
        vocab_size=120,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        attn_implementation="sdpa",
        **dims,
    )
    return model_class(config, add_pooling_layer=False).eval()


CPU_PLAN: AttentionPlan = plan_attention(AttentionBackend.AUTO, torch.device("cpu"), torch.float32, 12)


def packed_bert(model: BertModel, plan: AttentionPlan = CPU_PLAN) -> PackedBert:
    return PackedBert(model, plan)


def random_batch(rng: np.random.Generator, lengths: list[int]) -> list[Prepared]:
    return [Prepared(rng.integers(1, 120, size=n, dtype=np.int64)) for n in lengths]


CPU = torch.device("cpu")


def packed_states(
    packed: PackedBert, batch: list[Prepared], device: torch.device = CPU
) -> tuple[torch.Tensor, PackedTokens]:
    tokens = PackedTokens.of(batch, device)
    return packed.hidden_states(tokens), tokens


def padded_reference(model: BertModel, prepared: list[Prepared], pooling: Pooling) -> np.ndarray:
    batch = TokenBatch.pad(prepared, pad_id=0)
    with torch.inference_mode():
        mask = torch.from_numpy(batch.attention_mask)
        hidden = model(input_ids=torch.from_numpy(batch.input_ids), attention_mask=mask).last_hidden_state
    if pooling is Pooling.CLS:
        return hidden[:, 0].numpy()
    if pooling is Pooling.LAST:
        return hidden[torch.arange(len(batch.lengths)), torch.from_numpy(batch.lengths) - 1].numpy()
    weights = mask.unsqueeze(-1).float()
    return ((hidden * weights).sum(1) / weights.sum(1)).numpy()


@pytest.mark.parametrize("pooling", list(Pooling))
@pytest.mark.parametrize(
    "lengths",
    [[7, 1, 33, 12, 64, 2], [9, 9, 9], [5], [64, 64]],
    ids=["mixed", "uniform", "single", "all-alone"],
)
def test_packed_equals_padded_on_random_weights(pooling, lengths):
    model = tiny_bert()
    batch = random_batch(np.random.default_rng(len(lengths)), lengths)
    expected = padded_reference(model, batch, pooling)
    with torch.inference_mode():
        hidden, tokens = packed_states(packed_bert(model), batch)
        got = pool(hidden, tokens, pooling).numpy()
    assert hidden.shape == (sum(lengths), 48)  # only real tokens, no padding rows
    layout = BucketLayout.of(tokens.host_lengths, torch.device("cpu"), CPU_ALONE_FROM_TOKENS)
    assert [length for _, length in layout.alone] == [n for n in lengths if n >= CPU_ALONE_FROM_TOKENS]
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-4)


def test_packed_tokens_index_every_sequence_from_one_host_buffer():
    batch = random_batch(np.random.default_rng(3), [3, 1, 4])
    tokens = PackedTokens.of(batch, torch.device("cpu"))
    assert tokens.ids.tolist() == np.concatenate([item.ids for item in batch]).tolist()
    assert tokens.types.tolist() == [0] * 8
    assert tokens.positions.tolist() == [0, 1, 2, 0, 0, 1, 2, 3]
    assert tokens.segments.tolist() == [0, 0, 0, 1, 2, 2, 2, 2]
    assert tokens.cu_seqlens.tolist() == [0, 3, 4, 8]
    assert tokens.starts.tolist() == [0, 3, 4] and tokens.lasts.tolist() == [2, 3, 7]
    assert tokens.lengths.tolist() == [3, 1, 4] and tokens.longest == 4
    every = (
        tokens.ids,
        tokens.types,
        tokens.positions,
        tokens.segments,
        tokens.cu_seqlens,
        tokens.lasts,
        tokens.lengths,
    )
    assert {t.dtype for t in every} == {torch.int32}  # what flash varlen takes for cu_seqlens
    assert len({t.untyped_storage().data_ptr() for t in every}) == 1  # one buffer: one copy to a GPU
    assert PackedTokens.of(batch, torch.device("cpu"), 2).positions.tolist() == [2, 3, 4, 2, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("config_class", "model_class"), [(RobertaConfig, RobertaModel), (XLMRobertaConfig, XLMRobertaModel)]
)
@pytest.mark.parametrize("pooling", [Pooling.CLS, Pooling.MEAN])
def test_roberta_layouts_run_packed_with_positions_after_the_padding_index(
    config_class, model_class, pooling
):
    """RoBERTa's layers are BERT's; its first position id is ``pad + 1`` (here 2), which the padded
    forward derives from the ids and the packed one must set itself."""
    model = tiny_encoder(config_class, model_class, max_position_embeddings=70, pad_token_id=1)
    assert PackedBert.supports(model)
    packed = packed_bert(model)
    assert packed.first_position == 2
    rng = np.random.default_rng(5)
    lengths = [7, 1, 33, 12, 64, 2]
    batch = [Prepared(rng.integers(2, 120, size=n, dtype=np.int64)) for n in lengths]  # no pad id inside
    padded = TokenBatch.pad(batch, pad_id=1)
    with torch.inference_mode():
        mask = torch.from_numpy(padded.attention_mask)
        hidden = model(input_ids=torch.from_numpy(padded.input_ids), attention_mask=mask).last_hidden_state
        expected = pool(unpad(hidden, mask), PackedTokens.of(batch, CPU), pooling).numpy()
        tokens = PackedTokens.of(batch, CPU, packed.first_position)
        got = pool(packed.hidden_states(tokens), tokens, pooling).numpy()
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-4)
    # Counted from 0, as BERT does, the vectors come out wrong: the offset is what makes them equal.
    with torch.inference_mode():
        unshifted = PackedTokens.of(batch, CPU)
        wrong = pool(packed.hidden_states(unshifted), unshifted, pooling).numpy()
    assert np.abs(wrong - expected).max() > 1e-3


def test_long_sequences_attend_alone_and_the_rest_are_gathered_into_buckets():
    batch = random_batch(np.random.default_rng(0), [70, 5, 100, 8, 8])
    lengths = np.array([item.cost for item in batch])
    layout = BucketLayout.of(lengths, torch.device("cpu"), alone_from=64)
    assert layout.alone == ((0, 70), (75, 100))
    assert layout.gather is not None
    assert layout.gather.tolist() == [*range(70, 75), *range(175, 191)]
    assert [(b.rows, b.longest) for b in layout.buckets] == [(3, 8)]
    assert layout.padded_index is not None and len(layout.padded_index) == 21
    everything = BucketLayout.of(lengths, torch.device("cpu"))
    assert everything.alone == () and everything.gather is None


@pytest.mark.parametrize("pooling", list(Pooling))
def test_attention_buckets_keep_vectors_equal_to_the_padded_forward(pooling):
    # Many short sequences and two long ones, long first: the short ones must get their own bucket
    # (and so a different row order in the attention layout than in the batch).
    lengths = [60, *[3 + i % 4 for i in range(30)], 57]
    model = tiny_bert()
    batch = random_batch(np.random.default_rng(7), lengths)
    expected = padded_reference(model, batch, pooling)
    with torch.inference_mode():
        hidden, tokens = packed_states(packed_bert(model), batch)
        got = pool(hidden, tokens, pooling).numpy()
    layout = BucketLayout.of(tokens.host_lengths, torch.device("cpu"), CPU_ALONE_FROM_TOKENS)
    assert [(b.rows, b.longest) for b in layout.buckets] == [(30, 6), (2, 60)]
    assert layout.padded_rows == 30 * 6 + 2 * 60
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-4)


def _bucket_cost(lengths: list[int], spans: list[range], call_cost: int) -> int:
    return sum(len(span) * lengths[span.stop - 1] ** 2 + call_cost for span in spans)


@pytest.mark.parametrize("seed", range(6))
def test_attention_buckets_are_the_cheapest_cut(seed):
    rng = np.random.default_rng(seed)
    lengths = sorted(int(n) for n in rng.integers(1, 256, size=8))
    call_cost = int(rng.choice([1, 2000, CPU_BUCKET_CALL_COST, 10**6]))
    spans = attention_buckets(np.array(lengths), call_cost)
    assert spans[0].start == 0 and spans[-1].stop == len(lengths)
    assert all(a.stop == b.start for a, b in itertools.pairwise(spans))
    cheapest = min(
        _bucket_cost(
            lengths, [range(a, b) for a, b in itertools.pairwise((0, *cuts, len(lengths)))], call_cost
        )
        for size in range(len(lengths))
        for cuts in itertools.combinations(range(1, len(lengths)), size)
    )
    assert _bucket_cost(lengths, spans, call_cost) == cheapest


def test_equal_lengths_share_one_attention_call():
    assert attention_buckets(np.array([40] * 64)) == [range(0, 64)]
    assert attention_buckets(np.array([7])) == [range(0, 1)]


def test_fused_projection_does_not_hold_the_weights_twice():
    model = tiny_bert()
    query = model.encoder.layer[0].attention.self.query.weight.detach().clone()
    packed_bert(model)
    attention = model.encoder.layer[0].attention.self
    storages = {
        p.weight.untyped_storage().data_ptr() for p in (attention.query, attention.key, attention.value)
    }
    assert len(storages) == 1
    assert torch.equal(attention.query.weight, query)


@pytest.mark.parametrize(
    "model",
    [
        tiny_bert(position_embedding_type="relative_key"),
        tiny_bert(is_decoder=True),
        ElectraModel(
            ElectraConfig(vocab_size=120, hidden_size=48, num_hidden_layers=1, num_attention_heads=4)
        ),
    ],
    ids=["relative-positions", "decoder", "electra"],
)
def test_models_it_cannot_run_keep_the_padded_forward(model):
    assert not PackedBert.supports(model)
    assert not PackedBert.supports_config(model.config) or type(model).__name__ != "BertModel"


@pytest.mark.parametrize("precision", [ComputePrecision.FLOAT32, ComputePrecision.BFLOAT16])
def test_minilm_runs_packed_unless_opted_out_and_matches_the_padded_forward(minilm_dir, precision):
    packed = TorchDenseEncoder.load(LoadSpec(minilm_dir, "cpu", precision, 256))
    padded = TorchDenseEncoder.load(LoadSpec(minilm_dir, "cpu", precision, 256, loadtime={"packed": False}))
    assert packed.backbone.packed is not None and padded.backbone.packed is None
    texts = corpus(30)
    floor = 0.99999 if precision is ComputePrecision.FLOAT32 else 0.9999
    for pooling in Pooling:
        assert cosine(dense(packed, texts, pooling), dense(padded, texts, pooling)).min() >= floor


@pytest.mark.skipif(_onednn_linear() is None, reason="no oneDNN bf16 matmul on this CPU")
@pytest.mark.parametrize(
    ("hidden_act", "fused"), [("gelu", True), ("gelu_new", True), ("relu", True), ("silu", False)]
)
def test_bf16_cpu_layers_run_on_onednn_with_the_activation_fused_where_it_can_be(hidden_act, fused):
    model = tiny_bert(hidden_act=hidden_act)
    x = torch.randn(37, 48)
    intermediate = model.encoder.layer[0].intermediate
    expected = intermediate(x)
    linear_weights_to(model, torch.bfloat16)
    layer = packed_bert(model)._layers[0]
    assert layer.intermediate.onednn_post_op is not None and layer.qkv.onednn_post_op == ("none", "")
    assert (layer.intermediate.activation is None) is fused
    with torch.inference_mode():
        got = layer.intermediate(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected, atol=0.03, rtol=0.02)


def test_float32_layers_keep_torch_linear():
    layer = packed_bert(tiny_bert())._layers[0]
    assert layer.intermediate.onednn_post_op is None and layer.intermediate.activation is not None
