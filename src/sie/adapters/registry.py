"""``adapter_path`` names to adapter classes, imported only when a model that needs them loads.

Our own paths (``sie.adapters.dense_torch:TorchDenseEncoder``) work, and so do the public SIE's names
for the same families, so a model YAML written for the public server loads here unchanged.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

ALIASES: Final[dict[str, str]] = {
    "sie_server.adapters.sentence_transformer:SentenceTransformerDenseAdapter": "sie.adapters.dense_torch:TorchDenseEncoder",
    "sie_server.adapters.pytorch_embedding:PyTorchEmbeddingAdapter": "sie.adapters.dense_torch:TorchDenseEncoder",
    "sie_server.adapters.bert_flash:BertFlashAdapter": "sie.adapters.dense_torch:TorchDenseEncoder",
}

KNOWN: Final = frozenset(
    {"sie.adapters.dense_torch:TorchDenseEncoder", "sie.adapters.dense_onnx:OnnxDenseEncoder", *ALIASES}
)


class UnknownAdapter(LookupError):
    pass


def canonical(adapter_path: str) -> str:
    return ALIASES.get(adapter_path, adapter_path)


def adapter_class(adapter_path: str) -> Any:
    """The class for ``module:Class``; a bad name raises ``UnknownAdapter`` listing the known ones."""
    path = canonical(adapter_path)
    module_name, _, class_name = path.partition(":")
    if not class_name:
        raise UnknownAdapter(f"adapter_path '{adapter_path}' must look like 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, class_name)
    except (ImportError, AttributeError) as exc:
        known = ", ".join(sorted(KNOWN))
        raise UnknownAdapter(f"cannot import adapter '{adapter_path}' ({exc}); known: {known}") from exc
