"""The pure pieces of the device benchmark: the FLOPs estimate, the peak table, the random-model
builder (loaded by sentence-transformers and by our server's YAML parser), options and targets."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from bench import gpu_options
from bench.flops import EncoderDims, flops_per_token, peak_fraction, peak_tflops, token_weighted_mean_length
from bench.gpu_report import summary_markdown
from bench.gpu_results import (
    BATCHED,
    MANY_SINGLE,
    QUERY_SDK,
    SINGLE,
    Agreement,
    DeviceRun,
    ServerResult,
    ShapeResult,
    compute_targets,
    correctness_failures,
)
from bench.random_models import Shape, build, model_yaml, shape_named
from bench.raw import RawResult
from bench.stats import CellResult, CellSpec

MINILM = EncoderDims(hidden=384, layers=6, intermediate=1536)
TINY = Shape("tiny", hidden=32, layers=2, heads=2, intermediate=64, max_seq=64)


def test_non_embedding_parameters_of_the_minilm_config():
    # per layer: Q,K,V,O 4*(384*384+384) = 591360; FFN 384*1536+1536 + 1536*384+384 = 1181568;
    # two layer norms 4*384 = 1536; six layers. (transformers' BertModel agrees: 22565376 parameters
    # in all, 11918592 of them in the embeddings.)
    assert MINILM.non_embedding_params == 6 * (591360 + 1181568 + 1536) == 10_646_784


def test_flops_per_token_adds_attention_over_the_token_weighted_length():
    assert flops_per_token(MINILM, 100.0) == 2 * 10_646_784 + 4 * 6 * 384 * 100
    assert token_weighted_mean_length([10, 30]) == pytest.approx(25.0)  # (100 + 900) / 40
    assert token_weighted_mean_length([]) == 0.0


def test_encoder_dims_read_from_a_config_json(tmp_path: Path):
    (tmp_path / "config.json").write_text(
        '{"hidden_size": 768, "num_hidden_layers": 12, "intermediate_size": 3072, "vocab_size": 30522}'
    )
    assert EncoderDims.from_config(tmp_path / "config.json") == EncoderDims(768, 12, 3072)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA A10G", 125.0),
        ("NVIDIA L40S", None),  # not an L4
        ("none (cpu dry run)", None),
    ],
)
def test_peak_lookup_by_gpu_name(name: str, peak: float | None):
    assert peak_tflops(name) == peak


def test_peak_fraction():
    assert peak_fraction(1e6, 2e7, 989.0) == pytest.approx(1e6 * 2e7 / 989e12)
    assert peak_fraction(1e6, 2e7, None) is None


def test_unknown_shape_names_the_known_ones():
    with pytest.raises(ValueError, match="minilm, base"):
        shape_named("large")


def test_random_model_loads_in_sentence_transformers_and_our_catalog(tmp_path: Path, minilm_dir: Path):
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    from sie.catalog.catalog import Catalog
    from sie.catalog.model_config import load_model_config
    from sie.weights.sources import WeightSources

    [built] = build([TINY], minilm_dir, tmp_path / "a")
    assert built.model_id == "bench/tiny"
    model = SentenceTransformer(str(built.folder), device="cpu")
    assert model.max_seq_length == 64
    vectors = model.encode(["a short text", "another one"], convert_to_numpy=True)
    assert vectors.shape == (2, 32)  # the shape's width, through pooling
    assert vectors[0] == pytest.approx(vectors[0] / (vectors[0] ** 2).sum() ** 0.5)  # normalized

    config = load_model_config(built.yaml_path)
    assert config.tasks.encode is not None and config.tasks.encode.dims() == {"dense": 32}
    assert config.max_sequence_length == 64
    profile = config.resolve_profile("default")
    assert profile.max_batch_tokens == 16384
    assert profile.adapter_path == "sie.adapters.dense_torch:TorchDenseEncoder"
    assert profile.runtime == {"pooling": "mean", "normalize": True}
    assert Catalog.from_directory(built.yaml_path.parent).names() == ["bench/tiny"]
    assert WeightSources(hf_fallback=False).resolve(None, config.weights_path) == built.folder.resolve()

    [again] = build([TINY], minilm_dir, tmp_path / "b")  # same seed, same weights
    first, second = (
        load_file(built.folder / "model.safetensors"),
        load_file(again.folder / "model.safetensors"),
    )
    assert first.keys() == second.keys()
    assert all(first[k].equal(second[k]) for k in first)


def test_an_xlm_roberta_shape_runs_packed_in_our_encoder_and_equals_sentence_transformers(
    tmp_path: Path, minilm_dir: Path
):
    from sentence_transformers import SentenceTransformer

    from sie.adapters.contract import Forward, LoadSpec
    from sie.adapters.dense_torch import TorchDenseEncoder
    from sie.core.options import Capability, ComputePrecision, Pooling

    shape = Shape(
        "tiny-xlmr", hidden=32, layers=2, heads=2, intermediate=64, max_seq=64, model_type="xlm-roberta"
    )
    [built] = build([shape], minilm_dir, tmp_path)
    assert shape_named("xlmr-base").model_type == "xlm-roberta"
    texts = ["a short text", "another one, a little longer than the first", "x"]
    expected = SentenceTransformer(str(built.folder), device="cpu").encode(texts, convert_to_numpy=True)
    encoder = TorchDenseEncoder.load(LoadSpec(built.folder, "cpu", ComputePrecision.FLOAT32, 64))
    assert encoder.packs_tokens
    forward = Forward(frozenset({Capability.DENSE}), pooling=Pooling.MEAN)
    out = encoder.run(encoder.prepare(texts, forward), forward).dense
    assert out is not None
    cosine = (out * expected).sum(axis=1) / np.linalg.norm(out, axis=1)  # sentence-transformers' are unit
    assert cosine.min() > 1 - 1e-5


def test_model_yaml_of_the_base_shape(tmp_path: Path):
    data = model_yaml(shape_named("base"), tmp_path)
    assert data["sie_id"] == "bench/base"
    assert data["tasks"] == {"encode": {"dense": {"dim": 768}}}
    assert data["max_sequence_length"] == 512
    assert data["weights_path"] == str(tmp_path.resolve())


def _args(**given: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "device": "cuda",
        "shapes": "minilm,base",
        "precisions": "float16",
        "raw_precisions": None,
        "tokenizer_folder": None,
        "model_root": Path("/tmp/m"),
        "log_dir": Path("/tmp/l"),
        "seed": 0,
        "corpus_size": None,
        "query_count": 64,
        "raw_batch_sizes": None,
        "raw_sweep_items": None,
        "items": None,
        "max_seconds": 60.0,
        "loadgen_processes": None,
        "gpu_peak_tflops": None,
        "server_env": [],
        "server_src": None,
        "infinity": False,
    }
    return argparse.Namespace(**(values | given))


def test_device_defaults_and_raw_precisions_put_float32_first():
    opts = gpu_options.resolve(_args(precisions="bfloat16,float16"), argparse.ArgumentParser())
    assert [s.name for s in opts.shapes] == ["minilm", "base"]
    assert opts.raw_precisions == ("float32", "float16", "bfloat16")
    assert (opts.corpus_size, opts.items, opts.raw_sweep_items) == (4096, 8192, 1024)
    assert opts.raw_batch_sizes == (64, 128, 256, 512)
    assert opts.server_env["SIE_MAX_CONCURRENT_REQUESTS"] == "4096"
    only = gpu_options.resolve(_args(raw_precisions="float16"), argparse.ArgumentParser())
    assert only.raw_precisions == ("float32", "float16")


def test_bad_precision_is_a_usage_error():
    with pytest.raises(SystemExit):
        gpu_options.resolve(_args(precisions="int8"), argparse.ArgumentParser())


def _cell(spec: CellSpec, items_per_s: float, p50_ms: float = 5.0) -> CellResult:
    items = int(items_per_s)
    return CellResult(
        "sie",
        spec,
        items // spec.batch,
        items,
        items * 100,
        1.0,
        p50_ms,
        p50_ms,
        p50_ms,
        p50_ms,
        0,
        1.0,
        0.1,
        0.0,
    )


def _raw(precision: str, items_per_s: float, single_ms: float) -> RawResult:
    return RawResult(precision, 256, items_per_s, items_per_s * 100, single_query_p50_ms=single_ms)


def _run(server: ServerResult, shape: str = "minilm") -> DeviceRun:
    result = ShapeResult(shape, f"bench/{shape}", MINILM, {"corpus": 2.2e7, "queries": 2.1e7})
    result.raw = {"float32": _raw("float32", 1000.0, 4.0), "float16": _raw("float16", 2500.0, 3.0)}
    result.servers = [server]
    run = DeviceRun({"device": "cuda", "seed": 0, "loadgen_processes": 4, "elapsed_s": 60.0}, {}, {}, 989.0)
    run.shapes = [result]
    run.targets = compute_targets(run)
    return run


def _server(precision: str = "float16", effective: str | None = None) -> ServerResult:
    server = ServerResult(precision, effective or precision)
    server.agreement = Agreement(128, 0.99995, 0.99993, 0.99999, 100)
    server.cells = [
        _cell(QUERY_SDK, 200.0, p50_ms=4.5),
        _cell(SINGLE, 250.0),
        _cell(BATCHED, 9000.0),
        _cell(MANY_SINGLE, 3500.0),
    ]
    return server


def test_targets_met_and_not_met_for_float16():
    targets = {r.name.split(": ", 1)[1]: r for r in _run(_server()).targets}
    assert targets["32x32 items/s / raw float16 best batch"].value == pytest.approx(3.6)
    assert targets["32x32 items/s / raw float16 best batch"].met is True
    assert targets["32x32 items/s"].met is True  # 9000 >= 8000 on minilm
    assert targets["64x1 items/s / 1x1 items/s"].value == pytest.approx(14.0)
    assert targets["64x1 items/s / 1x1 items/s"].met is False  # 14 < 15
    assert targets["64x1 items/s"].met is True
    assert targets["sdk 10-word p50 - raw float16 single (ms)"].value == pytest.approx(1.5)
    assert targets["sdk 10-word p50 - raw float16 single (ms)"].met is True
    assert targets["min cosine to raw float32 (alone and batched)"].value == pytest.approx(0.99993)
    assert targets["min cosine alone vs batched"].met is True


def test_base_shape_holds_4000_and_no_single_item_floor():
    targets = {r.name.split(": ", 1)[1]: r for r in _run(_server(), shape="base").targets}
    assert targets["32x32 items/s"].target == ">= 4000"
    assert targets["64x1 items/s"].target == ""  # the 3000 items/s floor is the MiniLM shape's
    assert targets["64x1 items/s"].met is None


def test_bfloat16_speed_is_information_and_latency_compares_what_ran():
    targets = {r.name.split(": ", 1)[1]: r for r in _run(_server("bfloat16", effective="float16")).targets}
    assert targets["32x32 items/s / raw float16 best batch"].met is None
    assert targets["32x32 items/s / raw float16 best batch"].target == ""
    # asked for bfloat16, ran float16 (an old GPU): compared with the raw float16 forward
    assert targets["sdk 10-word p50 - raw float16 single (ms)"].value == pytest.approx(1.5)
    assert targets["min cosine to raw float32 (alone and batched)"].met is True


def test_a_missing_measurement_is_not_met_and_a_failed_server_fails_the_run():
    failed = ServerResult("float16", error="RuntimeError: exited with 1")
    run = _run(failed)
    held = [r for r in run.targets if r.target]
    assert held and all(r.met is False and r.value is None for r in held)
    failures = correctness_failures(run)
    assert failures[0] == "minilm float16: RuntimeError: exited with 1"
    assert any("min cosine to raw float32" in f for f in failures)


def test_summary_markdown_lists_every_target_with_its_verdict():
    run = _run(_server())
    run.corpus = {"texts": 4096, "tokens": 450000, "mean_tokens": 109.9, "token_weighted_mean_tokens": 136.0}
    run.machine = {
        "gpu": "NVIDIA H100 80GB HBM3",
        "cores": 16,
        "torch": "2.x",
        "cuda": "12",
        "transformers": "5",
        "sentence_transformers": "6",
    }
    text = summary_markdown(run)
    assert "| minilm | float16 | 32 x 32 (http) | 9000.0 |" in text
    assert text.count("**not met**") == 1
    assert len([line for line in text.splitlines() if line.startswith("| minilm float16:")]) == len(
        run.targets
    )
