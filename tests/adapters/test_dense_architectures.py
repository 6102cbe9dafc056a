"""The dense encoder on every architecture the catalogue's dense ids run, against sentence-transformers.

The catalogue serves BERT, XLM-RoBERTa, ModernBERT, Nomic BERT, Gemma 3, Qwen2, Qwen3 and Mistral embedders through
one class (``TorchDenseEncoder``). Each architecture is built here from a small config with seeded random
weights and the packaged tiny BERT's tokenizer, saved as a sentence-transformers folder (the pooling
its family uses: mean for the encoders, the last token for the causal LMs), and our vectors are held
to sentence-transformers' on the same folder, each text alone and inside a batch of mixed lengths.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from sentence_transformers.models import Dense, Normalize, Transformer
from sentence_transformers.models import Pooling as StPooling
from transformers import (
    AutoModel,
    BertConfig,
    Gemma3TextConfig,
    MistralConfig,
    ModernBertConfig,
    NomicBertConfig,
    PretrainedConfig,
    Qwen2Config,
    Qwen3Config,
    XLMRobertaConfig,
)

from sie.adapters.contract import LoadSpec
from sie.adapters.dense_torch import TorchDenseEncoder
from sie.core.options import Capability, ComputePrecision, Pooling
from sie.postprocess.quantize import l2_normalize
from tests.adapters.test_dense_equivalence import corpus as dense_corpus
from tests.conftest import dense

SMALL: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "pad_token_id": 0,
}
DECODER: dict[str, Any] = {**SMALL, "num_key_value_heads": 2, "max_position_embeddings": 512}

ARCHITECTURES: dict[str, tuple[Callable[[], PretrainedConfig], str]] = {
    "bert": (lambda: BertConfig(**SMALL, max_position_embeddings=512), "mean"),
    # EmbeddingGemma: a Gemma 3 text model with bidirectional attention, mean pooled.
    "gemma3": (
        lambda: Gemma3TextConfig(**DECODER, head_dim=16, use_bidirectional_attention=True),
        "mean",
    ),
    "xlm-roberta": (lambda: XLMRobertaConfig(**SMALL, max_position_embeddings=514), "mean"),
    # nomic-embed-text-v1.5: a rotary, SwiGLU, post-norm BERT (transformers' own since 5.x).
    "nomic-bert": (lambda: NomicBertConfig(**SMALL, max_position_embeddings=512), "mean"),
    "modernbert": (
        lambda: ModernBertConfig(
            **SMALL, max_position_embeddings=512, cls_token_id=101, sep_token_id=102, bos_token_id=101
        ),
        "mean",
    ),
    "qwen2": (lambda: Qwen2Config(**DECODER), "lasttoken"),
    "qwen3": (lambda: Qwen3Config(**DECODER, head_dim=16), "lasttoken"),
    "mistral": (lambda: MistralConfig(**DECODER, head_dim=16), "lasttoken"),
}
OURS = {"mean": Pooling.MEAN, "lasttoken": Pooling.LAST}


def build(name: str, tiny_bert: Path, root: Path) -> tuple[Path, str]:
    make, mode = ARCHITECTURES[name]
    torch.manual_seed(0)
    backbone = root / f"{name}-backbone"
    AutoModel.from_config(make()).save_pretrained(backbone)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_bert / file, backbone / file)
    transformer = Transformer(str(backbone), max_seq_length=256)
    pooling = StPooling(transformer.get_embedding_dimension(), pooling_mode=mode)
    folder = root / name
    SentenceTransformer(modules=[transformer, pooling, Normalize()], device="cpu").save(str(folder))
    return folder, mode


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_dense_architecture_equals_sentence_transformers(name: str, splade_dir: Path, tmp_path: Path) -> None:
    folder, mode = build(name, splade_dir, tmp_path)
    encoder = TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    corpus = dense_corpus(24, seed=3)
    ours = l2_normalize(dense(encoder, corpus, OURS[mode]))
    reference = SentenceTransformer(str(folder), device="cpu").encode(corpus, normalize_embeddings=True)
    cosine = (ours * reference).sum(axis=1)
    assert float(cosine.min()) >= 0.99999, name
    for index in (0, 7, len(corpus) - 1):
        alone = l2_normalize(dense(encoder, [corpus[index]], OURS[mode]))[0]
        assert float(np.dot(alone, ours[index])) >= 0.99999, (name, index)


def test_a_nomic_checkpoint_in_its_hub_code_layout_loads_without_the_hub_code(
    splade_dir: Path, tmp_path: Path
) -> None:
    """nomic-embed-text-v1.5 ships in the layout of nomic's Hub code (``encoder.layers.N.attn.Wqkv``,
    ``mlp.fc11``/``fc12``/``fc2``, ``norm1``/``norm2``, ``emb_ln``) with an ``auto_map`` to that code.
    transformers saves its own ``NomicBertModel`` in that layout too and converts it on load, so the
    folder built here is what the Hub holds; with the ``auto_map`` added, our encoder loads it with no
    remote code and its vectors equal sentence-transformers' on it."""
    folder, _ = build("nomic-bert", splade_dir, tmp_path)
    names = set(load_file(str(folder / "model.safetensors")))
    assert {"emb_ln.weight", "encoder.layers.0.attn.Wqkv.weight", "encoder.layers.0.mlp.fc11.weight"} <= names
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"}
    (folder / "config.json").write_text(json.dumps(config))
    encoder = TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    corpus = dense_corpus(12, seed=5)
    ours = l2_normalize(dense(encoder, corpus, Pooling.MEAN))
    reference = SentenceTransformer(str(folder), device="cpu").encode(corpus, normalize_embeddings=True)
    assert float((ours * reference).sum(axis=1).min()) >= 0.99999


def _tokenizer_without_eos(tiny_bert: Path, folder: Path) -> Path:
    """The packaged BERT tokenizer made Llama-like: it starts a text with a BOS ([CLS]) and ends it with
    nothing, while its config names an ``eos_token`` ([SEP]), as e5-mistral's and SFR's tokenizers do."""
    folder.mkdir()
    tokenizer = json.loads((tiny_bert / "tokenizer.json").read_text())
    tokenizer["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [101], "tokens": ["[CLS]"]}},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((tiny_bert / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "[SEP]"}))
    return folder


def test_append_eos_ends_every_text_with_the_eos_the_llm_embedders_were_trained_to_pool(
    splade_dir: Path, tmp_path: Path
) -> None:
    """The public server's ``append_eos`` (e5-mistral, SFR-Embedding, Linq-Embed-Mistral): each text
    ends with the tokenizer's EOS before last-token pooling. Held to sentence-transformers given each
    text with the EOS written after it (what the public server sends SGLang), alone and in a batch; a
    text past the length limit keeps its EOS as its last token."""
    tokenizer = _tokenizer_without_eos(splade_dir, tmp_path / "tokenizer")
    folder, _ = build("mistral", tokenizer, tmp_path)
    spec = LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256, loadtime={"append_eos": True})
    encoder = TorchDenseEncoder.load(spec)
    corpus = dense_corpus(16, seed=11)
    ours = l2_normalize(dense(encoder, corpus, Pooling.LAST))
    reference = SentenceTransformer(str(folder), device="cpu").encode(
        [f"{text}[SEP]" for text in corpus], normalize_embeddings=True
    )
    assert float((ours * reference).sum(axis=1).min()) >= 0.99999
    without = l2_normalize(
        dense(
            TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256)),
            corpus,
            Pooling.LAST,
        )
    )
    assert float((without * reference).sum(axis=1).max()) < 0.999  # the EOS changes what is pooled
    alone = l2_normalize(dense(encoder, [corpus[5]], Pooling.LAST))[0]
    assert float(np.dot(alone, ours[5])) >= 0.99999
    [long] = encoder.tokenizer.encode(["word " * 600])
    assert len(long) == 256
    assert long[0] == 101 and long[-1] == 102


def test_append_eos_adds_nothing_where_the_tokenizer_ends_texts_with_its_eos(
    splade_dir: Path, tmp_path: Path
) -> None:
    """A tokenizer that appends its EOS itself (Qwen3-Embedding's ends every text with
    ``<|endoftext|>``; BERT's with [SEP]) gets no second one, and a long text keeps its full length."""
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    shutil.copy(splade_dir / "tokenizer.json", tokenizer / "tokenizer.json")
    config = json.loads((splade_dir / "tokenizer_config.json").read_text())
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "[SEP]"}))
    folder, _ = build("qwen3", tokenizer, tmp_path)
    plain = TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    appended = TorchDenseEncoder.load(
        LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256, loadtime={"append_eos": True})
    )
    texts = ["a short text", "word " * 600]
    for mine, theirs in zip(appended.tokenizer.encode(texts), plain.tokenizer.encode(texts), strict=True):
        assert mine.tolist() == theirs.tolist()
        assert mine[-1] == 102


def test_append_eos_without_an_eos_token_fails_the_load(splade_dir: Path, tmp_path: Path) -> None:
    folder, _ = build("mistral", splade_dir, tmp_path)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    with pytest.raises(ValueError, match=r"append_eos is set but the tokenizer in .* names no eos_token"):
        TorchDenseEncoder.load(
            LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256, loadtime={"append_eos": True})
        )


def _whole_text_reference(folder: Path, texts: list[np.ndarray], mode: str) -> np.ndarray:
    """Each text's ids alone through transformers' own decoder with an explicit all-zero additive
    mask on eager attention (every token sees every token): the embedding of a decoder read
    bidirectionally, computed without our mask builder, padding or SDPA; normalised, pooled as
    ``mode`` says."""
    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    out = []
    with torch.inference_mode():
        for ids in texts:
            full = torch.zeros((1, 1, len(ids), len(ids)))
            hidden = model(input_ids=torch.from_numpy(ids)[None], attention_mask=full).last_hidden_state[0]
            vector = hidden[-1] if mode == "lasttoken" else hidden.mean(dim=0)
            out.append((vector / vector.norm()).numpy())
    return np.stack(out)


@pytest.mark.parametrize(
    ("name", "how"),
    [("qwen2", "config"), ("mistral", "forward_kwargs")],
    ids=["gte-qwen2-config-is-causal-false", "gritlm-forward-kwargs"],
)
def test_a_decoder_trained_bidirectional_embeds_with_full_attention(
    name: str, how: str, splade_dir: Path, tmp_path: Path
) -> None:
    """gte-Qwen2 (its config says ``is_causal: false``) and GritLM (the public YAML passes
    ``forward_kwargs: {is_causal: false}``) embed with every token attending to every other; a
    transformers decoder loaded as is masks causally. Ours equal transformers' decoder under an
    explicit full mask, each text alone and inside a padded batch, and differ from the causal reading
    (what sentence-transformers on transformers' class gives)."""
    folder, mode = build(name, splade_dir, tmp_path)
    corpus = dense_corpus(12, seed=7)
    if how == "forward_kwargs":
        mode = "mean"  # GritLM pools the mean
    pooling = OURS[mode]
    as_loaded = TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    causal = l2_normalize(dense(as_loaded, corpus, pooling))  # the folder as transformers reads it
    loadtime: dict[str, Any] = {}
    if how == "config":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "is_causal": False}))
    else:
        loadtime = {"forward_kwargs": {"is_causal": False}}
    encoder = TorchDenseEncoder.load(
        LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256, loadtime=loadtime)
    )
    ours = l2_normalize(dense(encoder, corpus, pooling))
    reference = _whole_text_reference(folder, encoder.tokenizer.encode(corpus), mode)
    assert float((ours * reference).sum(axis=1).min()) >= 0.99999
    alone = l2_normalize(dense(encoder, [corpus[4]], pooling))[0]
    assert float(np.dot(alone, ours[4])) >= 0.99999
    assert float((causal * reference).sum(axis=1).min()) < 0.999


def _with_dense_layers(name: str, tiny_bert: Path, root: Path, *layers: Dense) -> Path:
    """``build``'s folder with ``layers`` saved as sentence-transformers modules after pooling."""
    folder, _ = build(name, tiny_bert, root / "plain")
    model = SentenceTransformer(str(folder), device="cpu")
    transformer, pooling = model[0], model[1]
    target = root / f"{name}-dense"
    SentenceTransformer(modules=[transformer, pooling, *layers, Normalize()], device="cpu").save(str(target))
    return target


def test_the_dense_layers_after_pooling_run_as_sentence_transformers_runs_them(
    splade_dir: Path, tmp_path: Path
) -> None:
    """EmbeddingGemma's pipeline: mean pooling, then Dense 64 -> 192 and 192 -> 64 (identity, no bias),
    then Normalize. Our vectors equal sentence-transformers' on the folder, alone and in a batch, and
    the encoder reports the last layer's width."""
    torch.manual_seed(1)
    identity = torch.nn.Identity()
    folder = _with_dense_layers(
        "gemma3",
        splade_dir,
        tmp_path,
        Dense(64, 192, bias=False, activation_function=identity),
        Dense(192, 48, bias=False, activation_function=identity),
    )
    encoder = TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    assert encoder.dims[Capability.DENSE] == 48
    corpus = dense_corpus(12, seed=9)
    ours = l2_normalize(dense(encoder, corpus, Pooling.MEAN))
    reference = SentenceTransformer(str(folder), device="cpu").encode(corpus, normalize_embeddings=True)
    assert ours.shape == reference.shape == (len(corpus), 48)
    assert float((ours * reference).sum(axis=1).min()) >= 0.99999
    alone = l2_normalize(dense(encoder, [corpus[3]], Pooling.MEAN))[0]
    assert float(np.dot(alone, ours[3])) >= 0.99999


def test_dense_projection_path_chooses_the_dense_layer_to_run(splade_dir: Path, tmp_path: Path) -> None:
    """stella_en_1.5B_v5 ships a Dense layer per output size; the public YAML's ``dense_projection_path``
    names the one to run (here a Tanh layer with a bias, sentence-transformers' default kind)."""
    torch.manual_seed(2)
    folder = _with_dense_layers("qwen2", splade_dir, tmp_path, Dense(64, 32))
    listed = json.loads((folder / "modules.json").read_text())
    dense_path = next(m["path"] for m in listed if m["type"].endswith("Dense"))
    shutil.copytree(folder / dense_path, folder / "2_Dense_32")
    (folder / "modules.json").write_text(json.dumps([m for m in listed if not m["type"].endswith("Dense")]))
    spec = LoadSpec(
        folder, "cpu", ComputePrecision.FLOAT32, 256, loadtime={"dense_projection_path": "2_Dense_32"}
    )
    encoder = TorchDenseEncoder.load(spec)
    assert encoder.dims[Capability.DENSE] == 32
    corpus = dense_corpus(8, seed=4)
    ours = l2_normalize(dense(encoder, corpus, Pooling.LAST))
    (folder / "modules.json").write_text(json.dumps(listed))
    reference = SentenceTransformer(str(folder), device="cpu").encode(corpus, normalize_embeddings=True)
    assert float((ours * reference).sum(axis=1).min()) >= 0.99999
    plain = TorchDenseEncoder.load(
        LoadSpec(folder.parent / "plain" / "qwen2", "cpu", ComputePrecision.FLOAT32, 256)
    )
    assert plain.dims[Capability.DENSE] == 64  # a folder listing no Dense layer runs none


def test_a_dense_layer_with_an_activation_we_cannot_run_fails_the_load(
    splade_dir: Path, tmp_path: Path
) -> None:
    folder = _with_dense_layers(
        "bert", splade_dir, tmp_path, Dense(64, 32, activation_function=torch.nn.ReLU())
    )
    with pytest.raises(
        ValueError, match=r"a Dense layer with activation torch\.nn\.modules\.activation\.ReLU"
    ):
        TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))


def test_full_attention_on_eager_attention_equals_sdpa(splade_dir: Path, tmp_path: Path) -> None:
    """The full mask in both of its forms (SDPA's booleans, eager attention's additive floats) gives
    the same vectors, and a batch whose texts share one length (no padding) is read whole too."""
    folder, _ = build("qwen2", splade_dir, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "is_causal": False}))
    corpus = ["the same length one", "the same length two"]
    sdpa = TorchDenseEncoder.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    eager = TorchDenseEncoder.load(
        LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256, loadtime={"attn_implementation": "eager"})
    )
    reference = _whole_text_reference(folder, sdpa.tokenizer.encode(corpus), "lasttoken")
    for encoder in (sdpa, eager):
        ours = l2_normalize(dense(encoder, corpus, Pooling.LAST))
        assert float((ours * reference).sum(axis=1).min()) >= 0.99999
