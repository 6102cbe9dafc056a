"""Late interaction (ColBERT): one small normalised vector per token, compared by MaxSim.

Texts get a marker in front (``query_prefix`` / ``doc_prefix``, ``[Q] `` / ``[D] `` by default, as the
public server); queries are cut to ``query_max_length`` tokens and padded up to it with ``[MASK]``
tokens (``[MASK]`` or ``<mask>``) that the model attends to (query expansion, unless the checkpoint's
PyLate config says ``do_query_expansion: false`` or the YAML sets ``query_expansion``), documents to
``doc_max_length``. Every token's
last hidden state goes through the model's linear projection to ``token_dim`` and is L2-normalised;
punctuation tokens are dropped from documents. The projection comes from a sentence-transformers /
PyLate folder (``1_Dense``) or from the ``linear.weight`` beside the encoder in a colbert-ai checkpoint.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
import torch
import torch.nn.functional as F

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec, texts_only
from sie.adapters.runtime.state_dicts import read_state_dict
from sie.adapters.runtime.transformer import TransformerAdapter
from sie.adapters.runtime.window import past_window_error
from sie.catalog.families import COLBERT_OPTIONS
from sie.core.options import Capability, OverflowPolicy

_PROJECTION_FILES: Final = (
    "1_Dense/model.safetensors",
    "1_Dense/pytorch_model.bin",
    "model.safetensors",
    "pytorch_model.bin",
)


def _load_projection(folder: Path) -> torch.Tensor:
    """``[token_dim, hidden]``: the first ``linear.weight`` found among the known places."""
    for name in _PROJECTION_FILES:
        path = folder / name
        if not path.exists():
            continue
        weight = read_state_dict(path).get("linear.weight")
        if weight is not None:
            return weight.float()
    raise FileNotFoundError(
        f"{folder} has no ColBERT projection ('linear.weight' in {', '.join(_PROJECTION_FILES)})"
    )


def checkpoint_expands_queries(folder: Path) -> bool:
    """Whether the checkpoint pads queries with [MASK] (query expansion): PyLate saves its
    ``do_query_expansion`` in ``config_sentence_transformers.json`` (the ModernBERT ColBERTs set it
    false, and the public server does not expand their queries); ColBERTs that say nothing expand."""
    try:
        config = json.loads((folder / "config_sentence_transformers.json").read_text())
    except (OSError, ValueError):
        return True
    return not (isinstance(config, dict) and config.get("do_query_expansion") is False)


class ColbertEncoder(TransformerAdapter):
    family = "ColBERT"
    capabilities = frozenset({Capability.MULTIVECTOR})
    request_options = COLBERT_OPTIONS

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        options = spec.loadtime
        weight = _load_projection(spec.weights)
        token_dim = int(options.get("token_dim", weight.shape[0]))
        if weight.shape != (token_dim, self.backbone.hidden_size):
            raise ValueError(
                f"ColBERT projection is {tuple(weight.shape)}, expected ({token_dim}, {self.backbone.hidden_size})"
            )
        self._projection = weight.to(self.backbone.device)
        self.dims = {Capability.MULTIVECTOR: token_dim}
        self._query_prefix = str(options.get("query_prefix", "[Q] "))
        self._doc_prefix = str(options.get("doc_prefix", "[D] "))
        self._query_length = int(options.get("query_max_length", 32))
        self._doc_length = int(options.get("doc_max_length", spec.max_seq_length or 512))
        self._expand = bool(options.get("query_expansion", checkpoint_expands_queries(spec.weights)))
        names = [options["mask_token"]] if "mask_token" in options else ["[MASK]", "<mask>"]
        mask_id = next((i for n in names if (i := self.tokenizer.token_id(str(n))) is not None), None)
        if mask_id is None and self._expand:
            raise ValueError(f"the tokenizer has none of {names} for query expansion")
        self._mask_id = mask_id or 0
        # PyLate drops punctuation tokens from documents unless the model says not to.
        skip_punctuation = options.get("doc_punctuation_skiplist", True) is not False
        self._skip = np.fromiter(
            (
                i
                for c in (string.punctuation if skip_punctuation else "")
                if (i := self.tokenizer.token_id(c)) is not None
            ),
            dtype=np.int64,
        )

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        is_query = forward.is_query
        prefix, limit = (
            (self._query_prefix, self._query_length) if is_query else (self._doc_prefix, self._doc_length)
        )
        if forward.max_length is not None:  # the request's length, never past the model's
            limit = min(limit, forward.max_length)
        encoded = self._marked(texts_only(inputs, self.family), prefix)
        prepared = []
        for ids in encoded:
            if len(ids) > limit and forward.overflow is OverflowPolicy.ERROR:
                prepared.append(Prepared.refused(past_window_error(len(ids), limit)))
                continue
            if len(ids) > limit:  # keep the closing separator, as the tokenizer's truncation does
                ids = np.concatenate((ids[: limit - 1], ids[-1:]))
            if is_query and self._expand and len(ids) < limit:
                ids = np.concatenate((ids, np.full(limit - len(ids), self._mask_id, dtype=ids.dtype)))
            prepared.append(Prepared(ids))
        return prepared

    def _marked(self, texts: list[str], prefix: str) -> list[np.ndarray]:
        """Each text's ids with its query or document marker: the prefix read as text before it."""
        return self.tokenizer.encode([prefix + text for text in texts])

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        with self.backbone.running(forward.lora):
            hidden, tokens = self.backbone.token_states(batch)
            # Under autocast the matmul runs in half precision whatever its inputs: back to float32.
            vectors = F.normalize(hidden.float() @ self._projection.T, dim=-1).float().cpu().numpy()
        per_item = tokens.per_item(vectors)
        if not forward.is_query:
            per_item = [v[~np.isin(item.ids, self._skip)] for v, item in zip(per_item, batch, strict=True)]
        return BatchOutputs(multivector=per_item)

    def close(self) -> None:
        del self._projection
        super().close()
