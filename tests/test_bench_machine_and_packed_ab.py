"""The benchmarks' machine description, and the packed-vs-padded A/B run end to end on a small shape."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import machine, packed_ab


def test_every_benchmark_names_the_cpu_class():
    info = machine.machine("cpu")
    assert info["cores"] == os.cpu_count() and info["gpu"] == "none"
    assert info["cpu_isa"] in {"AMX-BF16", "AVX512-BF16", "AVX512", "AVX2", "no AVX2"}
    assert machine.cpu_class() == f"{os.cpu_count()}-core {info['cpu']}, {info['cpu_isa']} (widest)"


def test_a_cuda_run_without_a_gpu_fails_instead_of_passing_as_a_cpu_one():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        machine.machine("cuda")


def test_packed_and_padded_agree_and_a_ratio_comes_out(tmp_path: Path, minilm_dir: Path):
    args = packed_ab.build_parser().parse_args(
        ["--shape", "minilm", "--batch", "6", "--batches", "2", "--rounds", "2", "--corpus-size", "24"]
    )
    args.model_root = tmp_path
    result = packed_ab.run(args)
    assert result["shape"] == "minilm" and result["model_type"] == "bert"
    assert result["max_cosine_distance"] < 1e-5  # the gate: both sides give the same vectors
    assert result["packed_items_per_s"] > 0 and result["padded_items_per_s"] > 0
    assert result["packed_over_padded"] > 0
    assert result["machine"]["cpu_isa"]
