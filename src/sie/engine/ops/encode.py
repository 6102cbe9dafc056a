"""``encode``: dense, sparse and multi-vector embeddings of each item, in request order."""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from sie.adapters.batch import ItemOutputs, ModelInput
from sie.adapters.contract import Forward
from sie.catalog.admit import admit_encode
from sie.catalog.errors import InvalidInput
from sie.core.options import Capability, OutputDType
from sie.engine.inputs import encode_input, encode_task
from sie.engine.ops.parts import Answer, Parts, check_outputs
from sie.engine.runner import BatchGroup
from sie.postprocess.outputs import Postprocess
from sie.postprocess.quantize import wire_dtype_name
from sie.wire.requests import EncodeRequest
from sie.wire.responses import DenseVector, EncodeResponse, EncodeResult, MultiVector, SparseVector


async def encode(
    parts: Parts, model: str, request: EncodeRequest, wait_loaded: bool = False
) -> Answer[EncodeResponse]:
    started = time.perf_counter()
    admitted = admit_encode(parts.admission, model, request)
    name, plan, items = admitted.entry.name, admitted.plan, request.items
    keep = frozenset(plan.output_types)
    if wait_loaded:
        await parts.registry.wait_loaded(name)
    with parts.registry.hold(name) as held:
        loaded = held.model
        muvera = loaded.muvera if plan.muvera else None
        if plan.muvera and muvera is None:
            raise InvalidInput(f"Model '{name}' has no MUVERA configuration")
        computed = muvera.computed(keep) if muvera is not None else keep
        check_outputs(held, computed)
        inputs: list[ModelInput] = [encode_input(plan, item, name, loaded.adapter) for item in items]
        with parts.registry.lora(held, plan.lora) as lora:
            group = BatchGroup(
                Forward(
                    computed,
                    plan.pooling,
                    plan.is_query,
                    task=encode_task(plan, loaded.adapter),
                    lora=lora,
                    max_length=plan.max_length,
                    overflow=plan.overflow,
                ),
                Postprocess(keep, plan.normalize, plan.output_dtype, plan.muvera),
            )
            inference = await parts.infer(held, inputs, group)
        dims = loaded.dims(plan.muvera)
    results = [
        encode_result(item.id, result.outputs, plan.output_dtype, dims)
        for item, result in zip(items, inference.results, strict=True)
    ]
    timing = inference.timing(started, postprocessed=plan.output_dtype is not OutputDType.FLOAT32)
    parts.observe(model, "encode", timing)
    response = EncodeResponse(model=name, items=results, timing=timing, usage=inference.usage())
    return Answer(response, timing, inference.tokens, inference.item_tokens)


def encode_result(
    item_id: str | None, outputs: ItemOutputs, dtype: OutputDType, dims: Mapping[Capability, int]
) -> EncodeResult:
    """``dims`` are the sizes before quantisation (a packed binary vector still reports its width)."""
    name = wire_dtype_name(dtype)
    result = EncodeResult(id=item_id)
    if outputs.dense is not None:
        result.dense = DenseVector(dims[Capability.DENSE], name, outputs.dense)
    if outputs.sparse is not None:
        values = outputs.sparse.values
        sparse_dtype = "float16" if values.dtype == np.float16 else "float32"
        result.sparse = SparseVector(
            dims.get(Capability.SPARSE), sparse_dtype, outputs.sparse.indices, values
        )
    if outputs.multivector is not None:
        vectors = outputs.multivector
        result.multivector = MultiVector(dims[Capability.MULTIVECTOR], int(vectors.shape[0]), name, vectors)
    return result
