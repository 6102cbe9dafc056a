"""``extract``: entities, classes and the like from each item. The adapter gets the labels, the
instruction and the runtime options (the profile's, overlaid by the request's) as one ``Task``, and
items batch together only with items of an equal task."""

from __future__ import annotations

import time
from typing import Final

from sie.adapters.batch import ModelInput
from sie.adapters.contract import Forward
from sie.catalog.admit import admit_extract
from sie.core.extraction import Extraction
from sie.core.options import Capability
from sie.engine.inputs import extract_input
from sie.engine.ops.parts import Answer, Parts, check_outputs, item_id
from sie.engine.runner import BatchGroup
from sie.postprocess.outputs import Postprocess
from sie.wire.requests import ExtractRequest
from sie.wire.responses import ExtractResponse, ExtractResult

EXTRACT: Final = frozenset({Capability.EXTRACT})


async def extract(
    parts: Parts, model: str, request: ExtractRequest, wait_loaded: bool = False
) -> Answer[ExtractResponse]:
    started = time.perf_counter()
    admitted = admit_extract(parts.admission, model, request)
    name, task, lora_id, items = admitted.entry.name, admitted.task, admitted.lora_id, request.items
    overflow = admitted.overflow
    if wait_loaded:
        await parts.registry.wait_loaded(name)
    with parts.registry.hold(name) as held:
        check_outputs(held, EXTRACT)
        adapter = held.model.adapter
        inputs: list[ModelInput] = [extract_input(item, name, adapter) for item in items]
        with parts.registry.lora(held, lora_id) as lora:
            forward = Forward(EXTRACT, task=task, lora=lora, overflow=overflow)
            group = BatchGroup(forward, Postprocess(EXTRACT))
            inference = await parts.infer(held, inputs, group)
    results = [
        extract_result(item_id(item.id, i), result.outputs.extraction)
        for i, (item, result) in enumerate(zip(items, inference.results, strict=True))
    ]
    timing = inference.timing(started, postprocessed=False)
    parts.observe(model, "extract", timing)
    return Answer(ExtractResponse(name, results, inference.usage()), timing, inference.tokens)


def extract_result(item_id: str, extraction: Extraction | None) -> ExtractResult:
    found = extraction or Extraction()
    if found.error is not None:  # a failed item says why and nothing else, as the public server's
        return ExtractResult(item_id, [], [], [], [], {}, found.error)
    return ExtractResult(
        item_id, found.entities, found.relations, found.classifications, found.objects, found.data
    )
