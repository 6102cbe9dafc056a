"""Python clients for an SIE server, a drop-in for the public ``sie-sdk`` (0.10.1) clients.

``SIEClient`` blocks, ``SIEAsyncClient`` awaits; both take the same arguments and return the same
dicts: numpy arrays for vectors, plain lists and numbers for everything else. Depends only on httpx,
msgpack and numpy.

Client-side helpers, as in the public package: ``sie.sdk.encoding`` turns results into plain lists
and dicts (its functions are also exported here) and ``sie.sdk.scoring`` computes MaxSim from
multivectors.
"""

from sie.sdk._async import SIEAsyncClient
from sie.sdk._errors import (
    InputTooLongError,
    LoraLoadingError,
    ModelLoadFailedError,
    ModelLoadingError,
    PoolError,
    ProvisioningError,
    RequestError,
    ResourceExhaustedError,
    ServerError,
    SIEConnectionError,
    SIEError,
)
from sie.sdk._sync import SIEClient
from sie.sdk._types import (
    CapacityInfo,
    EncodeResult,
    ExtractResult,
    GenerateChunk,
    GenerateResult,
    GenerationUsage,
    Item,
    ModelInfo,
    PoolInfo,
    ScoreResult,
    WorkerInfo,
)
from sie.sdk.encoding import (
    SparseVector,
    dense_embedding,
    multivector_embedding,
    normalize_sparse_vector,
    sparse_embedding,
    sparse_embedding_dict,
)

__all__ = [
    "CapacityInfo",
    "EncodeResult",
    "ExtractResult",
    "GenerateChunk",
    "GenerateResult",
    "GenerationUsage",
    "InputTooLongError",
    "Item",
    "LoraLoadingError",
    "ModelInfo",
    "ModelLoadFailedError",
    "ModelLoadingError",
    "PoolError",
    "PoolInfo",
    "ProvisioningError",
    "RequestError",
    "ResourceExhaustedError",
    "SIEAsyncClient",
    "SIEClient",
    "SIEConnectionError",
    "SIEError",
    "ScoreResult",
    "ServerError",
    "SparseVector",
    "WorkerInfo",
    "dense_embedding",
    "multivector_embedding",
    "normalize_sparse_vector",
    "sparse_embedding",
    "sparse_embedding_dict",
]
