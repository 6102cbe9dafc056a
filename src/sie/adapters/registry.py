"""``adapter_path`` names to adapter classes, imported only when a model that needs them loads.

Our own paths (``sie.adapters.dense_torch:TorchDenseEncoder``) work, and so do the public SIE's names
for the same families, so a model YAML written for the public server loads here unchanged.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Final

_DENSE = "sie.adapters.dense_torch:TorchDenseEncoder"
_SPLADE = "sie.adapters.splade:SpladeEncoder"
_COLBERT = "sie.adapters.colbert:ColbertEncoder"
_BGE_M3 = "sie.adapters.bge_m3:BgeM3Encoder"
_CROSS_ENCODER = "sie.adapters.cross_encoder:CrossEncoderScorer"
_GLINER = "sie.adapters.gliner:GlinerExtractor"
_NLI = "sie.adapters.nli_zero_shot:NliZeroShotClassifier"
_CLIP = "sie.adapters.clip:ClipEncoder"
_SIGLIP = "sie.adapters.clip:SiglipEncoder"

# The public server splits a family over flash kernels and their fallbacks; here one class runs each
# family, so every public name of it maps there. Public adapters for models that need code from the
# Hub (rope_flash, nomic_flash, gte_sparse_flash, jina_flash_cross_encoder) or another runtime (sglang,
# the causal-LM rerankers) have no alias: a YAML naming them fails with the known names listed.
ALIASES: Final[dict[str, str]] = {
    "sie_server.adapters.sentence_transformer:SentenceTransformerDenseAdapter": _DENSE,
    "sie_server.adapters.pytorch_embedding:PyTorchEmbeddingAdapter": _DENSE,
    "sie_server.adapters.bert_flash:BertFlashAdapter": _DENSE,
    "sie_server.adapters.xlm_roberta_flash:XLMRobertaFlashAdapter": _DENSE,
    "sie_server.adapters.modernbert_flash:ModernBERTFlashAdapter": _DENSE,
    "sie_server.adapters.qwen2_flash:Qwen2FlashAdapter": _DENSE,
    "sie_server.adapters.splade_flash:SPLADEFlashAdapter": _SPLADE,
    "sie_server.adapters.sentence_transformer:SentenceTransformerSparseAdapter": _SPLADE,
    "sie_server.adapters.colbert:ColBERTAdapter": _COLBERT,
    "sie_server.adapters.colbert_modernbert_flash:ColBERTModernBERTFlashAdapter": _COLBERT,
    "sie_server.adapters.colbert_rotary_flash:ColBERTRotaryFlashAdapter": _COLBERT,
    "sie_server.adapters.bge_m3_flash:BGEM3FlashAdapter": _BGE_M3,
    "sie_server.adapters.bge_m3:BGEM3Adapter": _BGE_M3,
    "sie_server.adapters.bge_m3_flag:BGEM3FlagAdapter": _BGE_M3,  # FlagEmbedding's heads, the same three outputs
    "sie_server.adapters.bert_flash_cross_encoder:BertFlashCrossEncoderAdapter": _CROSS_ENCODER,
    "sie_server.adapters.modernbert_flash_cross_encoder:ModernBertFlashCrossEncoderAdapter": _CROSS_ENCODER,
    "sie_server.adapters.cross_encoder:CrossEncoderAdapter": _CROSS_ENCODER,
    "sie_server.adapters.gliner:GLiNERAdapter": _GLINER,
    "sie_server.adapters.gliner_bi:GLiNERBiAdapter": _GLINER,  # gliner runs bi-encoders through the same calls
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
        _BGE_M3,
        _CROSS_ENCODER,
        _GLINER,
        _NLI,
        # Token-classification NER has no public adapter (the public server runs NER through GLiNER).
        "sie.adapters.token_ner:TorchTokenNer",
        "sie.adapters.token_ner_onnx:OnnxTokenNer",
        _CLIP,
        _SIGLIP,
    }
)

KNOWN: Final = frozenset({*CANONICAL, *ALIASES})

# What a family reads from a request's ``options`` beyond its operation's own (its class's
# ``request_options``). Declared here, beside the names, so a request can be checked against it
# without importing the family's module: the gateway checks every request and must never import torch.
TOKEN_ENTITY_OPTIONS: Final = frozenset({"threshold", "merge_adjacent_entities"})
GLINER_OPTIONS: Final = frozenset(
    {"threshold", "flat_ner", "multi_label", "merge_adjacent_entities", "precompute_labels"}
)
NLI_OPTIONS: Final = frozenset({"hypothesis_template", "multi_label"})
_REQUEST_OPTIONS: Final[dict[str, frozenset[str]]] = {
    _GLINER: GLINER_OPTIONS,
    _NLI: NLI_OPTIONS,
    "sie.adapters.token_ner:TorchTokenNer": TOKEN_ENTITY_OPTIONS,
    "sie.adapters.token_ner_onnx:OnnxTokenNer": TOKEN_ENTITY_OPTIONS,
}


def declared_request_options(adapter_path: str) -> frozenset[str] | None:
    """The request options of a built-in family (no import), or None for a custom adapter, whose
    class alone knows."""
    path = canonical(adapter_path)
    return (
        _REQUEST_OPTIONS.get(path, frozenset()) if path in CANONICAL else None
    )  # each alias also in its ``<package>.adapter:`` spelling


class UnknownAdapter(LookupError):
    pass


_PUBLIC_PREFIX: Final = "sie_server.adapters."
_PUBLIC_SUBMODULE: Final = ".adapter:"


def canonical(adapter_path: str) -> str:
    """Our class path for ``adapter_path``. The public server moved some adapters from a package's
    ``__init__`` into its ``adapter`` submodule between releases, and YAMLs name either spelling
    (``siglip:SiglipAdapter`` and ``siglip.adapter:SiglipAdapter``), so both map to one alias."""
    if adapter_path.startswith(_PUBLIC_PREFIX) and _PUBLIC_SUBMODULE in adapter_path:
        package, _, class_name = adapter_path.partition(_PUBLIC_SUBMODULE)
        adapter_path = f"{package}:{class_name}"
    return ALIASES.get(adapter_path, adapter_path)


def adapter_class(adapter_path: str, config_dir: Path | None = None) -> Any:
    """The class for ``package.module:Class``, or for ``file.py:Class`` (a custom adapter in a Python
    file next to the model's YAML, as the public server allows); a bad name raises ``UnknownAdapter``
    listing the known ones."""
    path = canonical(adapter_path)
    module_name, _, class_name = path.partition(":")
    if not class_name:
        raise UnknownAdapter(f"adapter_path '{adapter_path}' must look like 'package.module:Class'")
    try:
        if module_name.endswith(".py"):
            module = _module_from_file((config_dir or Path.cwd()) / module_name)
        else:
            module = importlib.import_module(module_name)
        return getattr(module, class_name)
    except (ImportError, AttributeError, FileNotFoundError) as exc:
        known = ", ".join(sorted(KNOWN))
        raise UnknownAdapter(f"cannot import adapter '{adapter_path}' ({exc}); known: {known}") from exc


def _module_from_file(file: Path) -> ModuleType:
    """Import a file once per path (its module name is derived from the path, so two YAML folders may
    each have an ``adapter.py``)."""
    name = "sie_custom_adapter_" + hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file}")
    if not file.is_file():
        raise FileNotFoundError(f"{file} does not exist")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
