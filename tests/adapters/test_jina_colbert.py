"""jina-colbert-v2 against transformers' own ``JinaEmbeddingsV3Model`` on the same weights.

The test builds a tiny jina-colbert-v2 as the Hub holds it (tests/builders.py: Jina's flash weight
names, a Hub config naming Jina's code, ``linear.weight`` beside the encoder, the marker tokens). The
reference runs the model object transformers built, before it was saved, on ids laid out by hand:
[CLS], the marker, the text, [SEP]; queries padded with [MASK] to their length; the projection,
per-token L2 norm, and documents' punctuation tokens dropped.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import JinaEmbeddingsV3Config, JinaEmbeddingsV3Model

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.jina_colbert import JinaColbertEncoder
from sie.core.options import Capability, ComputePrecision
from tests import builders

MULTI = frozenset({Capability.MULTIVECTOR})
QUERIES = ["what causes high blood pressure?", "a much longer query that is certainly cut at twelve tokens"]
DOCS = ["Hypertension, often caused by stress; salt and genetics!", "ok", " ".join(["blood pressure"] * 40)]
LOADTIME = {
    "token_dim": builders.COLBERT_TOKEN_DIM,
    "query_max_length": 12,
    "doc_max_length": 48,
    "query_prefix": "[QueryMarker]",
    "doc_prefix": "[DocumentMarker]",
}


def reference(folder: Path, texts: list[str], is_query: bool) -> list[np.ndarray]:
    hub = json.loads((folder / "config.json").read_text())
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    config = JinaEmbeddingsV3Config(
        **{k: hub[k] for k in keys},
        max_position_embeddings=hub["max_position_embeddings"],
        type_vocab_size=1,
        pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": hub["rotary_emb_base"]},
    )
    torch.manual_seed(3)  # the builder's seed: the same weights, built rather than loaded
    model = JinaEmbeddingsV3Model(config, add_pooling_layer=False).eval()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    marker = tokenizer.token_to_id("[QueryMarker]" if is_query else "[DocumentMarker]")
    mask = tokenizer.token_to_id("[MASK]")
    limit = 12 if is_query else 48
    rows = []
    for text in texts:
        ids = tokenizer.encode(text).ids
        ids = [ids[0], marker, *ids[1:]]
        if len(ids) > limit:
            ids = ids[: limit - 1] + ids[-1:]
        if is_query:
            ids += [mask] * (limit - len(ids))
        rows.append(ids)
    projection = load_file(str(folder / "model.safetensors"))["linear.weight"]
    skip = {tokenizer.token_to_id(c) for c in string.punctuation} - {None}
    out = []
    with torch.no_grad():
        for ids in rows:  # each alone: no padding in the reference
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
            vectors = torch.nn.functional.normalize(hidden @ projection.T, dim=-1)
            keep = [i for i, t in enumerate(ids) if is_query or t not in skip]
            out.append(vectors[keep].numpy())
    return out


@pytest.mark.parametrize("prefixed", [False, True], ids=["bare", "roberta-prefixed"])
@pytest.mark.parametrize("is_query", [True, False])
def test_equals_transformers_jina_embeddings_v3(
    splade_dir: Path, tmp_path: Path, is_query: bool, prefixed: bool
) -> None:
    folder = builders.jina_colbert(splade_dir, tmp_path / "jina-colbert", prefixed=prefixed)
    encoder = JinaColbertEncoder.load(
        LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime=LOADTIME)
    )
    texts = QUERIES if is_query else DOCS
    forward = Forward(MULTI, is_query=is_query)
    ours = encoder.run(encoder.prepare(texts, forward), forward).multivector or []
    expected = reference(folder, texts, is_query)
    for mine, theirs in zip(ours, expected, strict=True):
        assert mine.shape == theirs.shape
        cosine = (mine * theirs).sum(axis=1)
        assert float(cosine.min()) >= 0.99999
    alone = encoder.run(encoder.prepare(texts[:1], forward), forward).multivector or []
    np.testing.assert_allclose(alone[0], ours[0], atol=1e-5)


def test_a_config_of_another_jina_model_is_refused(splade_dir: Path, tmp_path: Path) -> None:
    folder = builders.jina_colbert(splade_dir, tmp_path / "jina-colbert")
    hub = json.loads((folder / "config.json").read_text())
    for change, message in (
        ({"position_embedding_type": "absolute"}, "its positions are not rotary"),
        ({"lora_adaptations": ["retrieval.query"]}, "carries LoRA task adapters"),
    ):
        (folder / "config.json").write_text(json.dumps({**hub, **change}))
        with pytest.raises(ValueError, match=message):
            JinaColbertEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime=LOADTIME))
    (folder / "config.json").write_text(json.dumps({k: v for k, v in hub.items() if k != "rotary_emb_base"}))
    with pytest.raises(ValueError, match="names no rotary_emb_base"):
        JinaColbertEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime=LOADTIME))


def test_a_misnamed_weight_fails_the_load(splade_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    folder = builders.jina_colbert(splade_dir, tmp_path / "jina-colbert")
    weights = load_file(str(folder / "model.safetensors"))
    weights["encoder.layers.0.mixer.Wqkv_renamed.weight"] = weights.pop("encoder.layers.0.mixer.Wqkv.weight")
    save_file(weights, folder / "model.safetensors")
    with pytest.raises(ValueError, match="does not fit JinaEmbeddingsV3Model"):
        JinaColbertEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime=LOADTIME))
