"""The family table, as data: every ``adapter_path`` a model YAML may name, ours and the public SIE's
(aliases of ours, so a YAML written for the public server loads here unchanged), the families this
release does not serve, and what each family reads from a request (its options, an ``output_schema``).

Nothing here imports a family: the gateway and sie-config check requests and configs against this
table without torch. ``sie.adapters.loading`` imports the class a path names, when a model loads.
"""

from __future__ import annotations

from functools import cache
from typing import Final

_DENSE = "sie.adapters.dense_torch:TorchDenseEncoder"
_SPLADE = "sie.adapters.splade:SpladeEncoder"
_COLBERT = "sie.adapters.colbert:ColbertEncoder"
_BGE_M3 = "sie.adapters.bge_m3:BgeM3Encoder"
_CROSS_ENCODER = "sie.adapters.cross_encoder:CrossEncoderScorer"
_GLINER = "sie.adapters.gliner:GlinerExtractor"
_NLI = "sie.adapters.nli_zero_shot:NliZeroShotClassifier"
_CLIP = "sie.adapters.clip:ClipEncoder"
_SIGLIP = "sie.adapters.clip:SiglipEncoder"
_CAUSAL_RERANKER = "sie.adapters.causal_reranker:CausalLmReranker"
_GLICLASS = "sie.adapters.gliclass:GliclassClassifier"
_OWLV2 = "sie.adapters.owlv2:Owlv2Detector"
_GROUNDING_DINO = "sie.adapters.grounding_dino:GroundingDinoDetector"
_COLPALI = "sie.adapters.colpali:ColPaliEncoder"
_COLQWEN2 = "sie.adapters.colqwen2:ColQwen2Encoder"
_COLSMOL = "sie.adapters.colsmol:ColSmolEncoder"
_GLINER2 = "sie.adapters.gliner2:Gliner2Extractor"
_GLINER2_DECIDE = "sie.adapters.gliner2_decide:Gliner2Decider"
_LAYA = "sie.adapters.laya:LayaDecider"
_GLIFORMER = "sie.adapters.gliformer:GliformerModel"
_JINA_RERANKER = "sie.adapters.jina_reranker:JinaRerankerScorer"
_DONUT = "sie.adapters.donut:DonutExtractor"
_FLORENCE2 = "sie.adapters.florence2:Florence2Extractor"
_ST_CROSS_ENCODER = "sie.adapters.st_cross_encoder:SentenceTransformersCrossEncoder"
_GLIREL = "sie.adapters.glirel:GlirelExtractor"
_GLINER_UNION = "sie.adapters.gliner_union:GlinerUnionExtractor"
_JINA_COLBERT = "sie.adapters.jina_colbert:JinaColbertEncoder"
_QWEN3_VL_EMBEDDING = "sie.adapters.qwen3_vl_embedding:Qwen3VlEmbedder"
_QWEN3_VL_RERANKER = "sie.adapters.qwen3_vl_reranker:Qwen3VlReranker"
_STABLEBRIDGE = "sie.adapters.stablebridge:StablebridgePruner"
_GENERATOR = "sie.adapters.generation.causal_lm:CausalLmGenerator"

# The public server splits a family over flash kernels and their fallbacks; here one class runs each
# family, so every public name of it maps there. Public adapters for models that need code from the
# Hub (rope_flash, nomic_flash, gte_sparse_flash) or another runtime (CTranslate2, TensorRT-LLM)
# have no alias: they are refused by family (``NOT_SERVED``), any other unknown name fails its load
# with the known names listed.
ALIASES: Final[dict[str, str]] = {
    "sie_server.adapters.sentence_transformer:SentenceTransformerDenseAdapter": _DENSE,
    "sie_server.adapters.pytorch_embedding:PyTorchEmbeddingAdapter": _DENSE,
    "sie_server.adapters.bert_flash:BertFlashAdapter": _DENSE,
    "sie_server.adapters.xlm_roberta_flash:XLMRobertaFlashAdapter": _DENSE,
    "sie_server.adapters.modernbert_flash:ModernBERTFlashAdapter": _DENSE,
    "sie_server.adapters.qwen2_flash:Qwen2FlashAdapter": _DENSE,
    # The public server hands its LLM embedders (e5-mistral, SFR, Linq, Qwen3-Embedding-4B) to an SGLang
    # server; they are Mistral and Qwen3 models transformers runs, last-token pooled (``append_eos``).
    "sie_server.adapters.sglang.embedding:SGLangEmbeddingAdapter": _DENSE,
    "sie_server.adapters.splade_flash:SPLADEFlashAdapter": _SPLADE,
    # The public server runs its generative models in an SGLang child process on a GPU; here
    # transformers' continuous batching runs them in process (``sie.adapters.generation``), on any
    # device, wherever transformers has the architecture (a checkpoint it cannot read fails its load).
    "sie_server.adapters.sglang.generation:SGLangGenerationAdapter": _GENERATOR,
    "sie_server.adapters.sglang.cuda13:SGLangCuda13Adapter": _GENERATOR,
    "sie_server.adapters.sglang.cuda13:SGLangStrictThinkingAdapter": _GENERATOR,
    "sie_server.adapters.sglang.gemma:SGLangGemmaAdapter": _GENERATOR,
    "sie_server.adapters.sentence_transformer:SentenceTransformerSparseAdapter": _SPLADE,
    "sie_server.adapters.colbert:ColBERTAdapter": _COLBERT,
    "sie_server.adapters.colpali:ColPaliAdapter": _COLPALI,
    "sie_server.adapters.colqwen2:ColQwen2Adapter": _COLQWEN2,
    "sie_server.adapters.colsmol:ColSmolAdapter": _COLSMOL,
    "sie_server.adapters.qwen3_vl_embedding:Qwen3VLEmbeddingAdapter": _QWEN3_VL_EMBEDDING,
    "sie_server.adapters.qwen3_vl_reranker:Qwen3VLRerankerAdapter": _QWEN3_VL_RERANKER,
    "sie_server.adapters.colbert_modernbert_flash:ColBERTModernBERTFlashAdapter": _COLBERT,
    "sie_server.adapters.colbert_rotary_flash:ColBERTRotaryFlashAdapter": _JINA_COLBERT,
    "sie_server.adapters.bge_m3_flash:BGEM3FlashAdapter": _BGE_M3,
    "sie_server.adapters.bge_m3:BGEM3Adapter": _BGE_M3,
    "sie_server.adapters.bge_m3_flag:BGEM3FlagAdapter": _BGE_M3,  # FlagEmbedding's heads, the same three outputs
    "sie_server.adapters.bert_flash_cross_encoder:BertFlashCrossEncoderAdapter": _CROSS_ENCODER,
    "sie_server.adapters.modernbert_flash_cross_encoder:ModernBertFlashCrossEncoderAdapter": _CROSS_ENCODER,
    "sie_server.adapters.cross_encoder:CrossEncoderAdapter": _CROSS_ENCODER,
    "sie_server.adapters.qwen2_flash_cross_encoder:Qwen2FlashCrossEncoderAdapter": _CAUSAL_RERANKER,
    "sie_server.adapters.jina_flash_cross_encoder:JinaFlashCrossEncoderAdapter": _JINA_RERANKER,
    "sie_server.adapters.native_causal_cross_encoder:NativeCausalCrossEncoderAdapter": _ST_CROSS_ENCODER,
    "sie_server.adapters.gliner:GLiNERAdapter": _GLINER,
    "sie_server.adapters.gliner_bi:GLiNERBiAdapter": _GLINER,  # gliner runs bi-encoders through the same calls
    # GLiNER2's entity, classification and Decide adapters; its schema mode (output_schema on an
    # entity model) stays refused.
    "sie_server.adapters.gliner2:GLiNER2Adapter": _GLINER2,
    "sie_server.adapters.gliner2.entities:GLiNER2EntitiesAdapter": _GLINER2,
    "sie_server.adapters.gliner2.classification:GLiNER2ClassificationAdapter": _GLINER2,
    "sie_server.adapters.gliner2.decide:GLiNER2DecideAdapter": _GLINER2_DECIDE,
    "sie_server.adapters.laya:LayaAdapter": _LAYA,
    "sie_server.adapters.gliformer:GLiFormerAdapter": _GLIFORMER,
    "sie_server.adapters.gliclass:GLiClassAdapter": _GLICLASS,
    "sie_server.adapters.glirel:GLiRELAdapter": _GLIREL,
    "sie_server.adapters.gliner_union:GLiNERUnionAdapter": _GLINER_UNION,
    "sie_server.adapters.stablebridge_pruner:StablebridgePrunerAdapter": _STABLEBRIDGE,
    "sie_server.adapters.owlv2:Owlv2Adapter": _OWLV2,
    "sie_server.adapters.donut:DonutAdapter": _DONUT,
    "sie_server.adapters.florence2:Florence2Adapter": _FLORENCE2,
    "sie_server.adapters.grounding_dino:GroundingDINOAdapter": _GROUNDING_DINO,
    "sie_server.adapters.nli_classification:NLIClassificationAdapter": _NLI,
    "sie_server.adapters.nli_classification_flash:NLIClassificationFlashAdapter": _NLI,
    "sie_server.adapters.clip:CLIPAdapter": _CLIP,
    "sie_server.adapters.siglip:SiglipAdapter": _SIGLIP,
}

# Our own class paths (what ``canonical`` returns); a shipped YAML must name one of these.
CANONICAL: Final = frozenset(
    {
        _DENSE,
        "sie.adapters.dense_onnx:OnnxDenseEncoder",
        _SPLADE,
        _COLBERT,
        _JINA_COLBERT,
        _COLPALI,
        _COLQWEN2,
        _COLSMOL,
        _QWEN3_VL_EMBEDDING,
        _QWEN3_VL_RERANKER,
        _BGE_M3,
        _CROSS_ENCODER,
        _JINA_RERANKER,
        _ST_CROSS_ENCODER,
        _CAUSAL_RERANKER,
        _GLINER,
        _GLINER2,
        _GLINER2_DECIDE,
        _LAYA,
        _GLIFORMER,
        _GLICLASS,
        _GLIREL,
        _GLINER_UNION,
        _STABLEBRIDGE,
        _GENERATOR,
        _OWLV2,
        _GROUNDING_DINO,
        _DONUT,
        _FLORENCE2,
        _NLI,
        # Token-classification NER has no public adapter (the public server runs NER through GLiNER).
        "sie.adapters.token_ner:TorchTokenNer",
        "sie.adapters.token_ner_onnx:OnnxTokenNer",
        _CLIP,
        _SIGLIP,
    }
)

KNOWN: Final = frozenset({*CANONICAL, *ALIASES})

# Families of the public catalogue this release does not run, by adapter module (a module and its
# submodules) or exact path: a model whose profile names one is listed by ``/v1/models`` as failed with
# ``MODEL_NOT_SERVED``, and a request for it is refused with 400 ``MODEL_NOT_SERVED`` naming the
# family, before anything is loaded or queued. docs/models.md has the table.
_PUBLIC_PREFIX: Final = "sie_server.adapters."
_P: Final = _PUBLIC_PREFIX
NOT_SERVED: Final[dict[str, str]] = {
    f"{_P}sglang": "a generative model (SGLang)",
    f"{_P}sglang_vision_extract": "a vision-language extraction model (SGLang)",
    f"{_P}ctranslate2": "a generative translation model (CTranslate2)",
    f"{_P}tensorrt_llm": "a generative model (TensorRT-LLM)",
    f"{_P}whisper": "a speech recognition model (Whisper)",
    f"{_P}parakeet": "a speech recognition model (Parakeet)",
    f"{_P}lighton_ocr": "an OCR vision-language model (LightOnOCR)",
    f"{_P}glm_ocr": "an OCR vision-language model (GLM-OCR)",
    f"{_P}paddleocr_vl": "an OCR vision-language model (PaddleOCR-VL)",
    f"{_P}mineru_vl": "an OCR vision-language model (MinerU)",
    f"{_P}sam3": "an image segmentation model (SAM 3)",
    f"{_P}colqwen3": "a visual document retriever (ColQwen3)",
    f"{_P}nemo_colembed": "a visual document retriever (NeMo ColEmbed)",
    f"{_P}topk_embed": "a visual document retriever (topk-embed)",
    f"{_P}st_sparse_vision": "a visual sparse encoder (v-SPLADE)",
    f"{_P}privacy_filter": "a PII filter (privacy-filter)",
    f"{_P}docling": "a document parser (Docling)",
    f"{_P}rope_flash": "an embedder on Alibaba's GTE 'NewModel' Hub code",
    f"{_P}nomic_flash": "an embedder on Nomic's nomic-bert Hub code",
    f"{_P}gte_sparse_flash": "a sparse encoder on Alibaba's GTE Hub code",
    f"{_P}remote": "a remote upstream (a profile that calls another server)",
    f"{_P}fake": "the public server's test fixture",
    "sie_server_rust.adapters.candle": "the Candle (Rust) runtime",
    # Public ids whose public adapter we alias but whose weights need more than our class runs
    # (scripts/import-public-models names them so): exact paths.
    "sie.adapters.not_built:HubCode": "a model whose architecture is code on the Hugging Face Hub",
    "sie.adapters.not_built:OpenClip": "an open_clip model",
    "sie.adapters.not_built:SparseMultivector": "a sparse multi-vector encoding (SMVE) of a ColBERT",
}
# Any other public adapter (a family of a later public release, say): refused by family too, never
# imported, so a config sie-config accepted into the bundle that lists it is answered, not loaded.
UNKNOWN_PUBLIC_FAMILY: Final = "a public SIE family this release does not know"


@cache  # every request's admission asks it, and a catalogue names few distinct paths
def not_served(adapter_path: str) -> str | None:
    """The family of ``adapter_path`` when this release does not run it (``NOT_SERVED``, or any other
    public ``sie_server.adapters`` path: ``UNKNOWN_PUBLIC_FAMILY``), else None."""
    path = canonical(adapter_path)
    if (
        path in CANONICAL
    ):  # one of ours, or a public name aliased to one (GLiNER2's entity and classification adapters)
        return None
    if path in NOT_SERVED:
        return NOT_SERVED[path]
    module = path.split(":", 1)[0]
    for prefix, family in NOT_SERVED.items():
        if module == prefix or module.startswith(prefix + "."):
            return family
    if module.startswith(_PUBLIC_PREFIX):
        return UNKNOWN_PUBLIC_FAMILY
    return None


# What a family reads from a request's ``options`` beyond its operation's own (its class's
# ``request_options``). Declared here, beside the names, so a request can be checked against it
# without importing the family's module: the gateway checks every request and must never import torch.
TOKEN_ENTITY_OPTIONS: Final = frozenset({"threshold", "merge_adjacent_entities"})
GLINER_OPTIONS: Final = frozenset(
    {
        "threshold",
        "flat_ner",
        "multi_label",
        "merge_adjacent_entities",
        "precompute_labels",
        "relation_labels",
        "relation_threshold",
    }
)
NLI_OPTIONS: Final = frozenset({"hypothesis_template", "multi_label"})
GLICLASS_OPTIONS: Final = frozenset({"threshold", "classification_type"})
GLIREL_OPTIONS: Final = frozenset({"threshold", "top_k"})
GLINER_UNION_OPTIONS: Final = frozenset(
    {"score_floor", "window_words", "window_overlap", "propagate_label", "name_min_letters", "default_labels"}
)
GLINER2_OPTIONS: Final = frozenset({"threshold"})
STABLEBRIDGE_OPTIONS: Final = frozenset({"prune_threshold", "highlight_threshold"})
LAYA_OPTIONS: Final = frozenset({"threshold", "max_len", "head_max_len"})
GLIFORMER_OPTIONS: Final = frozenset(
    {
        "threshold",
        "flat_ner",
        "multi_label",
        "classification_type",
        "classification_task",
        "label_groups",
        "relation_labels",
        "relation_threshold",
        "relations",  # refused with the public server's message: relation types go in relation_labels
    }
)
DECIDE_OPTIONS: Final = frozenset(
    {
        "label_groups",
        "classification_task",
        "classification_type",
        "multi_label",
        "threshold",
        "group_encoding",
        "examples",
        "overflow_policy",
    }
)
DETECTION_OPTIONS: Final = frozenset({"score_threshold", "threshold"})
GROUNDING_OPTIONS: Final = frozenset({"box_threshold", "text_threshold"})
DONUT_OPTIONS: Final = frozenset({"task", "max_new_tokens", "num_beams"})
# A ColBERT's query and document lengths per request (``Forward.max_length``), as the public server's.
COLBERT_OPTIONS: Final = frozenset({"query_max_length", "max_seq_length"})
FLORENCE2_OPTIONS: Final = DONUT_OPTIONS
_REQUEST_OPTIONS: Final[dict[str, frozenset[str]]] = {
    _GLINER: GLINER_OPTIONS,
    _NLI: NLI_OPTIONS,
    _GLICLASS: GLICLASS_OPTIONS,
    _GLINER2: GLINER2_OPTIONS,
    _GLINER2_DECIDE: DECIDE_OPTIONS,
    _LAYA: LAYA_OPTIONS,
    _GLIFORMER: GLIFORMER_OPTIONS,
    _GLIREL: GLIREL_OPTIONS,
    _GLINER_UNION: GLINER_UNION_OPTIONS,
    _STABLEBRIDGE: STABLEBRIDGE_OPTIONS,
    _OWLV2: DETECTION_OPTIONS,
    _GROUNDING_DINO: GROUNDING_OPTIONS,
    _DONUT: DONUT_OPTIONS,
    _COLBERT: COLBERT_OPTIONS,
    _JINA_COLBERT: COLBERT_OPTIONS,
    _FLORENCE2: FLORENCE2_OPTIONS,
    "sie.adapters.token_ner:TorchTokenNer": TOKEN_ENTITY_OPTIONS,
    "sie.adapters.token_ner_onnx:OnnxTokenNer": TOKEN_ENTITY_OPTIONS,
}


# The families that read an extract request's ``output_schema`` (Laya's typed questions, which
# GLiNER2.5-Decide reads too; GLiFormer's JSON Schema); the engine refuses one sent to any other,
# before anything is queued.
_OUTPUT_SCHEMA: Final = frozenset({_GLINER2_DECIDE, _LAYA, _GLIFORMER})


def takes_output_schema(adapter_path: str) -> bool:
    return canonical(adapter_path) in _OUTPUT_SCHEMA


def declared_request_options(adapter_path: str) -> frozenset[str] | None:
    """The request options of a built-in family (no import), or None for a custom adapter, whose
    class alone knows."""
    path = canonical(adapter_path)
    return (
        _REQUEST_OPTIONS.get(path, frozenset()) if path in CANONICAL else None
    )  # each alias also in its ``<package>.adapter:`` spelling


_PUBLIC_SUBMODULE: Final = ".adapter:"


def canonical(adapter_path: str) -> str:
    """Our class path for ``adapter_path``. The public server moved some adapters from a package's
    ``__init__`` into its ``adapter`` submodule between releases, and YAMLs name either spelling
    (``siglip:SiglipAdapter`` and ``siglip.adapter:SiglipAdapter``), so both map to one alias."""
    if adapter_path.startswith(_PUBLIC_PREFIX) and _PUBLIC_SUBMODULE in adapter_path:
        package, _, class_name = adapter_path.partition(_PUBLIC_SUBMODULE)
        adapter_path = f"{package}:{class_name}"
    return ALIASES.get(adapter_path, adapter_path)
