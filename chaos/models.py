"""The models a chaos run serves, one per operation, all small enough for CPU workers on one machine:
the packaged MiniLM (encode), a cross-encoder and a GLiNER built from the packaged tiny BERT with
seeded random heads (score, extract). Their weights are written once into the run's folder, so no
hub is needed; the standalone server and every worker read the same folder, so their answers are
comparable value for value.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Final

from tests import builders

ENCODER: Final = "sentence-transformers/all-MiniLM-L6-v2"
RERANKER: Final = "chaos/reranker"
EXTRACTOR: Final = "chaos/gliner"
LABELS: Final = ["person", "organization", "location"]
SHIPPED: Final = Path(__file__).resolve().parents[1] / "src" / "sie" / "models"

_RERANKER_YAML: Final = """\
sie_id: {id}
weights_path: "{weights}"
tasks:
  score: {{}}
max_sequence_length: 256
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie.adapters.cross_encoder:CrossEncoderScorer"}}
"""
_EXTRACTOR_YAML: Final = """\
sie_id: {id}
weights_path: "{weights}"
tasks:
  extract: {{}}
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie_server.adapters.gliner:GLiNERAdapter"}}
"""


def _tiny_bert() -> Path:
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the packaged tiny BERT (package cognition, the dev extra) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def build(root: Path) -> Path:
    """A models folder (``SIE_MODELS_DIR``) under ``root`` with the three models; built once per root."""
    models = root / "models"
    if (models / "chaos__gliner.yaml").exists():
        return models
    models.mkdir(parents=True, exist_ok=True)
    weights = root / "weights"
    bert = _tiny_bert()
    reranker = builders.bert_reranker(bert, weights / "reranker")
    extractor = builders.gliner(bert, weights / "gliner")
    shutil.copy(SHIPPED / "sentence-transformers__all-MiniLM-L6-v2.yaml", models)
    (models / "chaos__reranker.yaml").write_text(_RERANKER_YAML.format(id=RERANKER, weights=reranker))
    (models / "chaos__gliner.yaml").write_text(_EXTRACTOR_YAML.format(id=EXTRACTOR, weights=extractor))
    return models
