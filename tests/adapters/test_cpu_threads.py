"""A small batch's forward runs on one thread, a large one on all, and the count is given back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from transformers import BertConfig, BertModel

from sie.adapters.runtime.cpu_threads import FLOPS_PER_THREAD, ThreadsPerBatch, flops_per_token, threads_for


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_threads_grow_with_the_work_up_to_the_most() -> None:
    assert threads_for(0, 8) == 1
    assert threads_for(FLOPS_PER_THREAD * 0.99, 8) == 1
    assert threads_for(FLOPS_PER_THREAD * 3, 8) == 3
    assert threads_for(FLOPS_PER_THREAD * 100, 8) == 8


@pytest.mark.usefixtures("two_threads")
def test_a_small_batch_runs_on_one_thread_and_the_count_comes_back() -> None:
    threads = ThreadsPerBatch(2, per_token=1000.0)
    with threads.sized(10) as used:
        assert used == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with threads.sized(10**6) as used:  # 1 GFLOP
        assert used == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == 2


@pytest.mark.usefixtures("two_threads")
def test_a_gpu_model_or_one_thread_leaves_the_count_alone() -> None:
    for most in (None, 1):
        with ThreadsPerBatch(most, per_token=1.0).sized(1) as used:
            assert used == 2 and torch.get_num_threads() == 2


def test_flops_per_token_count_every_weight_but_the_embeddings() -> None:
    config = BertConfig(
        vocab_size=100, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16
    )
    model = BertModel(config, add_pooling_layer=False)
    h, i = 8, 16
    # per layer: q, k, v, out (h x h + h each), their LayerNorm (2h), up (h x i + i), down (i x h + h), LayerNorm
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    assert flops_per_token(model) == 2.0 * 2 * layer
