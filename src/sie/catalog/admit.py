"""Each operation's admission: the request's checks and its plan, with no model touched.

The engine runs these first; the cluster's gateway runs exactly these before it publishes anything
(so bad input gets the standalone server's 4xx from either front end). Nothing here imports the
model machinery (workers, adapters, torch; of the families only their declared table), which keeps
the gateway light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sie.catalog import options as request_options
from sie.catalog.admission import Admission
from sie.catalog.catalog import CatalogEntry
from sie.catalog.encode_plan import EncodePlan, plan_encode
from sie.catalog.errors import InvalidInput
from sie.catalog.families import takes_output_schema
from sie.catalog.options import lora_option, overflow_policy, overlay
from sie.catalog.score_plan import ScorePlan, plan_score
from sie.core.options import Capability, OutputDType, OverflowPolicy
from sie.core.task import Task, UnsupportedInput
from sie.wire.requests import EncodeParams, EncodeRequest, ExtractParams, ExtractRequest, ScoreRequest

# Sparse weights are not quantised to integers: their scale carries the ranking across documents.
SPARSE_DTYPES: Final = frozenset({OutputDType.FLOAT32, OutputDType.FLOAT16})
# Request options the engine itself reads; the rest of an extract request's options go to the adapter.
ENGINE_OPTIONS: Final = frozenset({"profile", "lora_id"})
EXTRACT_HINT: Final = (
    "does not support extraction. Use an extraction model like GLiNER, GLiClass, or Florence-2."
)


@dataclass(frozen=True)
class EncodeAdmitted:
    entry: CatalogEntry
    plan: EncodePlan


def admit_encode(admission: Admission, model: str, request: EncodeRequest) -> EncodeAdmitted:
    """The request's checks, no model touched (the gateway runs exactly these before publishing):
    its items' every time, its plan once per shape (``Admission.planned``)."""
    admission.items(request.items)
    params = request.params
    return admission.planned("encode", model, params, lambda: _plan_encode(admission, model, params))


def _plan_encode(admission: Admission, model: str, params: EncodeParams | None) -> EncodeAdmitted:
    entry = admission.served(model, params.options if params else None)
    request_options.check_known(
        entry, request_options.ENCODE, params.options if params else None, admission.custom_options
    )
    plan = plan_encode(
        entry.name,
        entry.config.output_types(),
        entry.profile.runtime,
        params.options if params else None,
        output_types=params.output_types if params else None,
        output_dtype=params.output_dtype if params else None,
        instruction=params.instruction if params else None,
    )
    if Capability.SPARSE in plan.output_types and plan.output_dtype not in SPARSE_DTYPES:
        raise InvalidInput(
            f"Sparse output takes output_dtype float32 or float16, not '{plan.output_dtype.value}'"
        )
    return EncodeAdmitted(entry, plan)


@dataclass(frozen=True)
class ScoreAdmitted:
    entry: CatalogEntry
    plan: ScorePlan
    lora_id: str | None
    overflow: OverflowPolicy = OverflowPolicy.DEFAULT


def admit_score(admission: Admission, model: str, request: ScoreRequest) -> ScoreAdmitted:
    """The request's checks, no model touched (the gateway runs exactly these before publishing):
    its items' every time, its plan once per shape (``Admission.planned``)."""
    query, items, options = request.query, request.items, request.options
    admission.items(items, query)
    admitted = admission.planned("score", model, options, lambda: _plan_score(admission, model, options))
    # A model that takes images scores images too: ColPali's pages by similarity, Qwen3-VL's reranker
    # in its pairs.
    images_count = admitted.entry.config.inputs.image
    if any(item.text is None and not (images_count and item.images) for item in [query, *items]):
        raise InvalidInput("Score requires text on the query and on every item")
    return admitted


def _plan_score(admission: Admission, model: str, options: dict[str, Any] | None) -> ScoreAdmitted:
    entry = admission.served(model, options)
    request_options.check_known(entry, request_options.SCORE, options, admission.custom_options)
    merged = overlay(entry.profile.runtime, options)
    plan = plan_score(entry.name, entry.config.tasks.score is not None, entry.config.output_types(), merged)
    return ScoreAdmitted(entry, plan, lora_option(merged), overflow_policy(merged))


@dataclass(frozen=True)
class ExtractAdmitted:
    entry: CatalogEntry
    task: Task
    lora_id: str | None
    overflow: OverflowPolicy = OverflowPolicy.DEFAULT


def admit_extract(admission: Admission, model: str, request: ExtractRequest) -> ExtractAdmitted:
    """The request's checks, no model touched (the gateway runs exactly these before publishing)."""
    items, params = request.items, request.params or ExtractParams()
    entry = admission.entry(model, items, params.options)
    name = entry.name
    if entry.config.tasks.extract is None:
        raise InvalidInput(f"Model '{name}' {EXTRACT_HINT}")
    schema = params.output_schema
    if schema is not None and not takes_output_schema(entry.profile.adapter_path):  # refused, not dropped
        raise InvalidInput(
            f"Model '{name}' does not take output_schema: its family extracts no structured data"
        )
    request_options.check_known(entry, request_options.EXTRACT, params.options, admission.custom_options)
    options = overlay(entry.profile.runtime, params.options)
    overflow = overflow_policy(options)
    instruction = params.instruction or options.get("instruction")
    try:
        task = Task.of(
            params.labels or (),
            {k: v for k, v in options.items() if k not in ENGINE_OPTIONS},
            instruction if isinstance(instruction, str) else None,
            schema,
        )
    except UnsupportedInput as exc:  # nested past what a request may
        raise InvalidInput(str(exc)) from exc
    return ExtractAdmitted(entry, task, lora_option(options), overflow)
