"""A context pruner: a reranker that also says which tokens of a passage to keep for a query
(``sugiv/stablebridge-pruner-highlighter``: BAAI/bge-reranker-v2-m3 and a trained pruning head).

``score`` is the reranker alone, exactly our cross-encoder's (the request's instruction before the
query). ``extract`` reads the request's ``instruction`` as the query and each item's text as a
passage: one forward of the (query, passage) pair gives the rerank score (the classifier on the first
token) and every token's last hidden state, from which the pruning head (Linear, GELU, Linear,
sigmoid) gives a keep probability. The passage's tokens, labelled ``highlight`` (at least
``highlight_threshold``), ``kept`` (at least ``prune_threshold``) or ``pruned``, are joined into
character spans: a token joins the span before it when it has that span's label and starts at most
one character after its end; a span's score is its tokens' mean probability. The first entity is a
summary: ``rerank={score:.4f} compression={c:.2%} kept={k}/{n}`` over the n spans, k of them not
pruned, scored by the rerank score.

What the public adapter leaves undefined is refused (400) instead: an extract without a query and a
passage with no tokens. A pair longer than the model reads is never cut (the public adapter cuts it,
and the passage's tail then gets no span at all): that item alone fails with ``INPUT_TOO_LONG``, the
others are answered; ``options.overflow_policy`` cannot make it cut, and ``error`` words the refusal as
every family's window refusal. The tokenizer's separators, padding and start tokens
typed into a passage get no span, as publicly, nor does a token covering no character of it (the
public adapter drops only those at its start).

The head's weights come from another repository (``loadtime.pruning_head_path``, a Hub id or a local
folder or file, through ``LoadSpec.fetch``; ``pruning_head_file`` inside it), a torch checkpoint read
with ``weights_only``: its state under ``pruning_head``, under ``model_state_dict`` (keys prefixed
``pruning_head.`` or ``classifier.``), under ``state_dict``, or the checkpoint itself.
"""

from __future__ import annotations

import logging
import pickle
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch

from sie.adapters.batch import BatchOutputs, ModelInput, Prepared
from sie.adapters.contract import Forward, LoadSpec, texts_only
from sie.adapters.cross_encoder import CrossEncoderScorer
from sie.adapters.options import finite_number, loadtime_integer, unit_option
from sie.adapters.runtime.transformer import absolute_positions
from sie.adapters.runtime.window import refusal
from sie.catalog.families import STABLEBRIDGE_OPTIONS
from sie.core.extraction import Entity, Extraction, ItemError
from sie.core.options import Capability
from sie.core.task import Task, UnsupportedInput
from sie.wire.errors import ErrorCode

log = logging.getLogger(__name__)

FAMILY: Final = "Stablebridge pruner"
HEAD_REPOSITORY: Final = "sugiv/stablebridge-pruner-highlighter"
HEAD_FILE: Final = "best.pt"
PRUNE_THRESHOLD: Final = 0.6
HIGHLIGHT_THRESHOLD: Final = 0.9
INTERMEDIATE_SIZE: Final = 512
NO_QUERY: Final = f"{FAMILY} needs the query: send it as the request's instruction"
# The tokens whose role a passage's span never covers (the public adapter's list).
_SKIPPED_ROLES: Final = ("pad_token", "sep_token", "cls_token", "bos_token")
# A Hub id's owner starts with a letter, digit or underscore (the Hub's rule), so a local path written
# "./heads" or "../heads" is never asked of the Hub, where its missing folder read as the Hub unreachable.
_HUB_ID: Final = re.compile(r"\w[\w.-]*/[\w.-]+")


class PruningHead(torch.nn.Module):
    """Each token's keep probability from its last hidden state (``[tokens, hidden] -> [tokens]``)."""

    def __init__(self, hidden_size: int, intermediate_size: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.classifier = torch.nn.Sequential(
            torch.nn.Linear(hidden_size, intermediate_size),
            torch.nn.GELU(),
            torch.nn.Dropout(dropout),
            torch.nn.Linear(intermediate_size, 1),
        )

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.classifier(states).squeeze(-1))


def head_state(checkpoint: object, file: Path) -> Mapping[str, Any]:
    """The head's state dict in one of the checkpoint layouts the module docstring lists."""
    if not isinstance(checkpoint, Mapping):
        raise ValueError(f"{file} holds a {type(checkpoint).__name__}, not a pruning head's state dict")
    state: object = checkpoint
    if "pruning_head" in checkpoint:
        state = checkpoint["pruning_head"]
    elif "model_state_dict" in checkpoint:
        whole = checkpoint["model_state_dict"]
        if isinstance(whole, Mapping):
            state = {
                str(key).removeprefix("pruning_head."): value
                for key, value in whole.items()
                if str(key).startswith(("pruning_head.", "classifier."))
            } or whole
    elif "state_dict" in checkpoint:
        state = checkpoint["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(key, str) for key in state):
        raise ValueError(f"{file} holds no pruning head's state dict")
    return state


def load_head(file: Path, hidden_size: int, intermediate_size: int, dropout: float) -> PruningHead:
    """The head from a torch checkpoint (``weights_only``: no code runs); a missing weight or one of
    another shape fails the load, which would otherwise serve a randomly initialised layer."""
    head = PruningHead(hidden_size, intermediate_size, dropout)
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError) as exc:  # code, other objects, a damaged archive
        reason = str(exc).split(".", 1)[0]
        raise ValueError(
            f"{file} is not a checkpoint of tensors alone (nothing in it ran): {reason}"
        ) from exc
    state = head_state(checkpoint, file)
    sizes = f"hidden_size {hidden_size}, intermediate_size {intermediate_size}"
    try:
        loaded = head.load_state_dict(dict(state), strict=False)
    except RuntimeError as exc:  # a weight of another shape
        raise ValueError(f"the pruning head in {file} does not fit {sizes}: {exc}") from exc
    if loaded.missing_keys:
        raise ValueError(
            f"the pruning head in {file} has no weights for {', '.join(loaded.missing_keys)} ({sizes})"
        )
    broken = [name for name, weight in head.named_parameters() if not torch.isfinite(weight).all()]
    if broken:  # every token's probability would be NaN: all pruned, each span's score null
        raise ValueError(f"the pruning head in {file} has weights that are not finite: {', '.join(broken)}")
    if loaded.unexpected_keys:
        log.warning("pruning head %s: ignoring %s", file, ", ".join(loaded.unexpected_keys))
    return head.eval()


def head_file(spec: LoadSpec) -> Path:
    """The head's checkpoint: ``pruning_head_path`` as a local file, a local folder, or a Hub
    repository resolved through the weight tiers, with ``pruning_head_file`` in a folder."""
    where = spec.loadtime.get("pruning_head_path", HEAD_REPOSITORY)
    name = spec.loadtime.get("pruning_head_file", HEAD_FILE)
    revision = spec.loadtime.get("pruning_head_revision")
    if not isinstance(where, str) or not where or not isinstance(name, str) or not name:
        raise ValueError("loadtime pruning_head_path and pruning_head_file must be non-empty strings")
    if revision is not None and not isinstance(revision, str):  # YAML reads a commit of digits as a number
        raise ValueError(f"loadtime pruning_head_revision must be a string (quote it), got {revision!r}")
    if spec.fetch is None:
        raise ValueError("this load cannot fetch the pruning head's weights")
    found = spec.fetch(where if _HUB_ID.fullmatch(where) else None, revision, where)
    file = found if found.is_file() else found / name
    if not file.is_file():
        raise FileNotFoundError(f"no pruning head {name!r} in {found}")
    return file


@dataclass(frozen=True)
class Thresholds:
    prune: float
    highlight: float

    @classmethod
    def of(cls, task: Task | None) -> Thresholds:
        return cls(
            unit_option(task, "prune_threshold", PRUNE_THRESHOLD, FAMILY),
            unit_option(task, "highlight_threshold", HIGHLIGHT_THRESHOLD, FAMILY),
        )

    def label(self, probability: float) -> str:
        if probability >= self.highlight:
            return "highlight"
        return "kept" if probability >= self.prune else "pruned"


def pruning_spans(
    text: str, offsets: np.ndarray, probabilities: np.ndarray, thresholds: Thresholds
) -> list[Entity]:
    """The passage's tokens (``offsets`` into ``text`` in order, each with its keep probability) as
    labelled character spans, neighbours of one label joined."""
    spans: list[Entity] = []
    group: list[float] = []
    start = end = 0
    label = ""
    for (first, last), probability in zip(offsets.tolist(), probabilities.tolist(), strict=True):
        tag = thresholds.label(probability)
        if group and tag == label and first <= end + 1:
            end = max(end, last)
            group.append(probability)
            continue
        if group:
            spans.append(Entity(text[start:end], label, sum(group) / len(group), start, end))
        start, end, group, label = first, last, [probability], tag
    if group:
        spans.append(Entity(text[start:end], label, sum(group) / len(group), start, end))
    return spans


def summary(rerank: float, spans: Sequence[Entity]) -> Entity:
    kept = sum(1 for span in spans if span.label != "pruned")
    compression = 1.0 - kept / max(len(spans), 1)
    text = f"rerank={rerank:.4f} compression={compression:.2%} kept={kept}/{len(spans)}"
    return Entity(text, "summary", rerank)


@dataclass(frozen=True)
class _Passage:
    text: str
    positions: np.ndarray  # where the passage's spanned tokens sit in the pair
    offsets: np.ndarray  # [spanned tokens, 2], into ``text``


class StablebridgePruner(CrossEncoderScorer):
    family = FAMILY
    request_options = STABLEBRIDGE_OPTIONS
    capabilities = frozenset({Capability.SCORE, Capability.EXTRACT})

    def __init__(self, spec: LoadSpec) -> None:
        head = head_file(spec)  # before the reranker loads: a missing head then costs no load
        super().__init__(spec)
        if self._head is None:
            raise ValueError(f"{spec.weights}: the pruner needs a BERT or XLM-RoBERTa reranker")
        hidden = self.backbone.hidden_size
        if loadtime_integer(spec.loadtime, "hidden_size", hidden) != hidden:
            raise ValueError(
                f"loadtime hidden_size {spec.loadtime['hidden_size']} is not the reranker's ({hidden})"
            )
        dropout = finite_number(spec.loadtime.get("dropout", 0.0))  # inactive at inference
        if not 0 <= dropout < 1:
            raise ValueError(f"loadtime dropout must be a number in [0, 1), got {spec.loadtime['dropout']!r}")
        intermediate = loadtime_integer(spec.loadtime, "intermediate_size", INTERMEDIATE_SIZE)
        self._pruning = load_head(head, hidden, intermediate, dropout).to(self.backbone.device)
        limits = (spec.max_seq_length, absolute_positions(self.backbone.base))
        self._limit = min((limit for limit in limits if limit), default=None)
        self._pairs = self.tokenizer.untruncated()
        self._unspanned = frozenset(self.tokenizer.role_ids(spec.tokenizer_folder, _SKIPPED_ROLES).values())

    def prepare(self, inputs: Sequence[ModelInput], forward: Forward) -> list[Prepared]:
        if Capability.EXTRACT not in forward.outputs:
            return super().prepare(inputs, forward)
        Thresholds.of(forward.task)  # refused here, before the items queue
        query = _query(forward)
        if not len(self._pairs.encode([query], special_tokens=False)[0]):  # "\x01": all normalised away
            raise UnsupportedInput(NO_QUERY)
        texts = texts_only(inputs, self.family)
        prepared = []
        for index, (text, pair) in enumerate(
            zip(texts, self._pairs.encode_pair_spans([(query, text) for text in texts]), strict=True)
        ):
            if self._limit is not None and len(pair.ids) > self._limit:
                prepared.append(
                    Prepared.refused(
                        refusal(forward, len(pair.ids), self._limit)
                        or ItemError(
                            ErrorCode.INPUT_TOO_LONG.value,
                            f"{FAMILY} reads at most {self._limit} tokens of query and passage together; "
                            f"this pair has {len(pair.ids)}: split its text",
                        )
                    )
                )
                continue
            starts, ends = pair.offsets[:, 0], pair.offsets[:, 1]
            spanned = pair.second & (ends > starts) & ~np.isin(pair.ids, list(self._unspanned))
            positions = np.flatnonzero(spanned)
            if not len(positions):
                raise UnsupportedInput(f"{FAMILY} needs a passage to prune: item {index} has no tokens")
            passage = _Passage(text, positions, pair.offsets[positions])
            prepared.append(Prepared(pair.ids, pair.type_ids, payload=passage))
        return prepared

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        if Capability.EXTRACT not in forward.outputs:
            return super().run(batch, forward)
        thresholds = Thresholds.of(forward.task)
        assert self._head is not None
        with self.backbone.running(forward.lora):
            hidden, tokens = self.backbone.token_states(batch)
            logits = self._head(hidden.index_select(0, tokens.starts).unsqueeze(1))
            with torch.autocast(hidden.device.type, enabled=False):  # thresholds read these: float32
                keep = self._pruning(hidden.float())
            reranks = torch.sigmoid(logits.float()).view(-1).cpu().numpy()
            per_item = tokens.per_item(keep.cpu().numpy())
        extractions = []
        for item, rerank, probabilities in zip(batch, reranks.tolist(), per_item, strict=True):
            passage: _Passage = item.payload
            spans = pruning_spans(passage.text, passage.offsets, probabilities[passage.positions], thresholds)
            extractions.append(Extraction(entities=[summary(rerank, spans), *spans]))
        return BatchOutputs(extractions=extractions)

    def close(self) -> None:
        del self._pruning
        super().close()


def _query(forward: Forward) -> str:
    query = forward.task.instruction if forward.task else None
    if not query or not query.strip():
        raise UnsupportedInput(NO_QUERY)
    return query
