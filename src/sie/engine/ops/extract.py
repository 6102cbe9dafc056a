"""``extract``: entities, classes and the like from each item. The adapter gets the labels, the
instruction and the runtime options (the profile's, overlaid by the request's) as one ``Task``, and
items batch together only with items of an equal task."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from sie.adapters.base import Forward, ModelInput, Task
from sie.core.extraction import Extraction
from sie.core.options import Capability
from sie.engine import request_options
from sie.engine.admission import Admission
from sie.engine.catalog import CatalogEntry
from sie.engine.errors import InvalidInput
from sie.engine.inputs import image_of, text_of
from sie.engine.ops.parts import Answer, Parts, check_outputs, item_id
from sie.engine.request_options import lora_option, overlay
from sie.engine.runner import BatchGroup
from sie.postprocess.outputs import Postprocess
from sie.wire.requests import ExtractParams, ExtractRequest
from sie.wire.responses import ExtractResponse, ExtractResult, Usage

# Request options the engine itself reads; the rest of an extract request's options go to the adapter.
ENGINE_OPTIONS: Final = frozenset({"profile", "lora_id"})

EXTRACT_HINT: Final = (
    "does not support extraction. Use an extraction model like GLiNER, GLiClass, or Florence-2."
)
EXTRACT: Final = frozenset({Capability.EXTRACT})


@dataclass(frozen=True)
class ExtractAdmitted:
    entry: CatalogEntry
    task: Task
    lora_id: str | None


def admit_extract(admission: Admission, model: str, request: ExtractRequest) -> ExtractAdmitted:
    """The request's checks, no model touched (the gateway runs exactly these before publishing)."""
    items, params = request.items, request.params or ExtractParams()
    entry = admission.entry(model, items, params.options)
    name = entry.name
    if entry.config.tasks.extract is None:
        raise InvalidInput(f"Model '{name}' {EXTRACT_HINT}")
    if params.output_schema is not None:  # no family here fills a schema: refused, not dropped unread
        raise InvalidInput(
            f"Model '{name}' does not take output_schema: its family extracts no structured data"
        )
    request_options.check_known(entry, request_options.EXTRACT, params.options)
    options = overlay(entry.profile.runtime, params.options)
    instruction = params.instruction or options.get("instruction")
    task = Task.of(
        params.labels or (),
        {k: v for k, v in options.items() if k not in ENGINE_OPTIONS},
        instruction if isinstance(instruction, str) else None,
    )
    return ExtractAdmitted(entry, task, lora_option(options))


async def extract(
    parts: Parts, model: str, request: ExtractRequest, wait_loaded: bool = False
) -> Answer[ExtractResponse]:
    started = time.perf_counter()
    admitted = admit_extract(parts.admission, model, request)
    name, task, lora_id, items = admitted.entry.name, admitted.task, admitted.lora_id, request.items
    if wait_loaded:
        await parts.registry.wait_loaded(name)
    with parts.registry.hold(name) as held:
        check_outputs(held, EXTRACT)
        adapter = held.model.adapter
        inputs: list[ModelInput] = [image_of(item, name, adapter) or text_of(item, adapter) for item in items]
        with parts.registry.lora(held, lora_id) as lora:
            group = BatchGroup(Forward(EXTRACT, task=task, lora=lora), Postprocess(EXTRACT))
            inference = await parts.infer(held, inputs, group)
    results = [
        extract_result(item_id(item.id, i), result.outputs.extraction)
        for i, (item, result) in enumerate(zip(items, inference.results, strict=True))
    ]
    timing = inference.timing(started, postprocessed=False)
    parts.observe(model, "extract", timing)
    return Answer(ExtractResponse(name, results, Usage(inference.tokens)), timing, inference.tokens)


def extract_result(item_id: str, extraction: Extraction | None) -> ExtractResult:
    found = extraction or Extraction()
    return ExtractResult(
        item_id, found.entities, found.relations, found.classifications, found.objects, found.data
    )
