"""Postprocessing per output type, once per batch on the device thread after the forward.

Dense vectors are normalised (when asked) and quantised; a multivector can become a fixed dense vector
(MUVERA) and is quantised per token; sparse values become float16 when that dtype is asked and stay
float32 otherwise (as the public server does for int8/uint8/binary); scores and extractions pass
through. Outputs the
response does not carry (a multivector that only fed MUVERA) are dropped here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sie.adapters.batch import BatchOutputs, SparseVector
from sie.core.options import Capability, OutputDType
from sie.postprocess.muvera import MuveraStage
from sie.postprocess.quantize import l2_normalize, quantize


@dataclass(frozen=True)
class Postprocess:
    keep: frozenset[Capability]  # what the response carries
    normalize: bool = True
    output_dtype: OutputDType = OutputDType.FLOAT32
    muvera: bool = False  # dense from the multivector, by the model's ``MuveraStage``


def finish(
    outputs: BatchOutputs, spec: Postprocess, is_query: bool, muvera: MuveraStage | None
) -> BatchOutputs:
    dense = outputs.dense
    if dense is not None and spec.normalize:
        dense = l2_normalize(dense)
    if spec.muvera:
        if muvera is None or outputs.multivector is None:
            raise ValueError("MUVERA needs the model's multivector output and its MUVERA configuration")
        dense = muvera(outputs.multivector, is_query)
    result = BatchOutputs(scores=outputs.scores, extractions=outputs.extractions)
    if Capability.DENSE in spec.keep and dense is not None:
        result.dense = quantize(dense, spec.output_dtype)
    if Capability.MULTIVECTOR in spec.keep and outputs.multivector is not None:
        result.multivector = [quantize(m, spec.output_dtype) for m in outputs.multivector]
    if Capability.SPARSE in spec.keep and outputs.sparse is not None:
        result.sparse = (
            [SparseVector(v.indices, v.values.astype(np.float16)) for v in outputs.sparse]
            if spec.output_dtype is OutputDType.FLOAT16
            else outputs.sparse
        )
    return result
