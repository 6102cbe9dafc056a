"""Seeded random-weight encoders of named shapes (BERT, or XLM-RoBERTa as in BGE-M3 and multilingual
E5), as sentence-transformers folders, and a model YAML for each that our server serves as
``bench/<shape>``.

Why random weights: speed depends on the shape, not on the values, and equivalence is measured
against sentence-transformers running the very same weights, so real weights add nothing to either
number. They also cannot travel: a GPU machine has no network and a device run carries 64 MiB, less
than one base-size checkpoint (440 MB). Only the tokenizer files travel; the weights are drawn here
from a fixed seed, so every run of a shape measures the same model.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

SEED: Final = 7
MAX_POSITIONS: Final = 512
MAX_BATCH_TOKENS: Final = 16384
TOKENIZER_FILES: Final = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
ADAPTER: Final = "sie.adapters.dense_torch:TorchDenseEncoder"


@dataclass(frozen=True)
class Shape:
    """The dimensions that decide an encoder's cost, and its architecture (``bert`` or ``xlm-roberta``:
    the same layers, positions numbered differently; both run packed in our server)."""

    name: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_seq: int
    model_type: str = "bert"


SHAPES: Final = {
    shape.name: shape
    for shape in (
        Shape("minilm", hidden=384, layers=6, heads=12, intermediate=1536, max_seq=256),
        Shape("base", hidden=768, layers=12, heads=12, intermediate=3072, max_seq=512),
        Shape(
            "xlmr-base",
            hidden=768,
            layers=12,
            heads=12,
            intermediate=3072,
            max_seq=512,
            model_type="xlm-roberta",
        ),
    )
}


# A model whose forward costs next to nothing (bench/host_path.py): what is left is the host's work.
TINY: Final = Shape("tiny", hidden=32, layers=1, heads=2, intermediate=64, max_seq=256)


def shape_named(name: str) -> Shape:
    try:
        return SHAPES[name]
    except KeyError:
        raise ValueError(f"unknown model shape {name!r}; known: {', '.join(SHAPES)}") from None


def model_id(shape: Shape) -> str:
    return f"bench/{shape.name}"


@dataclass(frozen=True)
class BuiltModel:
    shape: Shape
    model_id: str
    folder: Path  # the sentence-transformers folder (weights, tokenizer, pooling)
    yaml_path: Path  # in the models dir handed to ``sie-server serve --models-dir``


def _vocab_size(tokenizer_folder: Path) -> int:
    from tokenizers import Tokenizer

    return int(Tokenizer.from_file(str(tokenizer_folder / "tokenizer.json")).get_vocab_size(True))


def _read_json(path: Path, default: Any) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else default


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def _sentence_transformers_files(shape: Shape, source: Path, folder: Path) -> None:
    """Transformer -> mean pooling -> normalize, the all-MiniLM pipeline, with this shape's width and
    length. The source folder's own files are kept where present (prompts, lower-casing), but its
    dimension and maximum length belong to another model and are overwritten."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    _write_json(folder / "modules.json", modules)
    bert = _read_json(source / "sentence_bert_config.json", {"do_lower_case": False})
    _write_json(folder / "sentence_bert_config.json", bert | {"max_seq_length": shape.max_seq})
    pooling = _read_json(source / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
    _write_json(folder / "1_Pooling" / "config.json", pooling | {"word_embedding_dimension": shape.hidden})
    (folder / "2_Normalize").mkdir(exist_ok=True)
    extra = source / "config_sentence_transformers.json"
    if extra.exists():
        shutil.copy2(extra, folder / extra.name)


def build_folder(shape: Shape, tokenizer_folder: Path, folder: Path, seed: int = SEED) -> Path:
    """Writes a sentence-transformers folder for ``shape``: weights drawn from ``seed`` (the global
    torch RNG is left as it was), the tokenizer files of ``tokenizer_folder``."""
    import torch
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel
    from transformers.utils import logging as hf_logging

    missing = [name for name in TOKENIZER_FILES if not (tokenizer_folder / name).exists()]
    if missing:
        raise FileNotFoundError(f"{tokenizer_folder} lacks tokenizer file(s): {', '.join(missing)}")
    folder.mkdir(parents=True, exist_ok=True)
    dims: dict[str, Any] = {
        "vocab_size": _vocab_size(tokenizer_folder),
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "intermediate_size": shape.intermediate,
    }
    if shape.model_type == "xlm-roberta":
        # Positions start after the padding id (the tokenizer's, 0), so the table is one longer.
        config: Any = XLMRobertaConfig(**dims, max_position_embeddings=MAX_POSITIONS + 1, pad_token_id=0)
        model_class: Any = XLMRobertaModel
    else:
        config, model_class = BertConfig(**dims, max_position_embeddings=MAX_POSITIONS), BertModel
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # AutoModel builds the pooler either way; saving it keeps every load quiet (no "missing
        # weights" report) and seeded. Neither mean pooling nor our server reads it.
        model = model_class(config, add_pooling_layer=True)
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    model.save_pretrained(str(folder))
    for name in TOKENIZER_FILES:
        shutil.copy2(tokenizer_folder / name, folder / name)
    _sentence_transformers_files(shape, tokenizer_folder, folder)
    return folder


def model_yaml(shape: Shape, weights: Path) -> dict[str, Any]:
    """The model YAML (public schema, src/sie/engine/model_config.py) serving ``weights``."""
    return {
        "sie_id": model_id(shape),
        "weights_path": str(weights.resolve()),
        "inputs": {"text": True},
        "tasks": {"encode": {"dense": {"dim": shape.hidden}}},
        "max_sequence_length": shape.max_seq,
        "profiles": {
            "default": {
                "max_batch_tokens": MAX_BATCH_TOKENS,
                "adapter_path": ADAPTER,
                "adapter_options": {"runtime": {"pooling": "mean", "normalize": True}},
            }
        },
    }


def build(shapes: list[Shape], tokenizer_folder: Path, root: Path, seed: int = SEED) -> list[BuiltModel]:
    """``root/<shape>/`` (weights) and ``root/models/<shape>.yaml`` for each shape; the models dir
    holds only these YAMLs, so the server's catalog is exactly the bench models."""
    import yaml

    models_dir = root / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    built = []
    for shape in shapes:
        folder = build_folder(shape, tokenizer_folder, root / shape.name, seed)
        yaml_path = models_dir / f"{shape.name}.yaml"
        yaml_path.write_text(yaml.safe_dump(model_yaml(shape, folder), sort_keys=False), encoding="utf-8")
        built.append(BuiltModel(shape, model_id(shape), folder, yaml_path))
    return built


CAUSAL_ARCHITECTURES = ("qwen3", "qwen3_5")


def build_causal_lm(
    folder: Path,
    hidden: int,
    layers: int,
    tokenizer_folder: Path,
    seed: int = SEED,
    architecture: str = "qwen3",
) -> Path:
    """A seeded random-weight causal LM with ``tokenizer_folder``'s tokenizer (its vocabulary sets the
    output head's width, e.g. 30,522 for MiniLM's), saved as a generative model ships (config,
    weights, generation config, tokenizer): end-of-sequence is the tokenizer's [SEP], padding its
    [PAD]. ``qwen3``: Qwen3; ``qwen3_5``: Qwen3.5's hybrid, three Gated DeltaNet (linear-attention)
    layers to one of full attention as the released models interleave them, which the server runs on
    ``generate`` in padded batches rather than continuous batching. Heads are 64 wide, half as many
    key/value heads (grouped-query attention as in Qwen3), the MLP 3x ``hidden``. The output head is
    scaled by 8 (as tests/builders.py does) for sharper logits, so greedy choices have fewer near-ties
    between two implementations."""
    import torch
    import transformers
    from transformers import AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    if architecture not in CAUSAL_ARCHITECTURES:
        raise ValueError(f"architecture {architecture!r}: one of {', '.join(CAUSAL_ARCHITECTURES)}")
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    heads = max(1, hidden // 64)
    eos, pad = tokenizer.sep_token_id, tokenizer.pad_token_id
    hybrid: dict[str, Any] = {}
    if architecture == "qwen3_5":
        hybrid = {
            "layer_types": [("full_attention" if i % 4 == 3 else "linear_attention") for i in range(layers)],
            "linear_num_key_heads": heads,
            "linear_num_value_heads": heads,
            "linear_key_head_dim": 64,
            "linear_value_head_dim": 64,
        }
    Config, Model = (
        (transformers.Qwen3_5TextConfig, transformers.Qwen3_5ForCausalLM)
        if architecture == "qwen3_5"
        else (transformers.Qwen3Config, transformers.Qwen3ForCausalLM)
    )
    config = Config(
        **hybrid,
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=64,
        intermediate_size=hidden * 3,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: Any = Model(config)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False).save_pretrained(folder)  # type: ignore[no-untyped-call]
    return folder
