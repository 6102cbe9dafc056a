"""Python clients for an SIE server, a drop-in for the public ``sie-sdk`` (0.10.1) clients.

``SIEClient`` blocks, ``SIEAsyncClient`` awaits; both take the same arguments and return the same
dicts: numpy arrays for vectors, plain lists and numbers for everything else. Depends only on httpx,
msgpack and numpy.
"""

from sie.sdk._async import SIEAsyncClient
from sie.sdk._errors import (
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
from sie.sdk._types import EncodeResult, ExtractResult, Item, ModelInfo, ScoreResult

__all__ = [
    "EncodeResult",
    "ExtractResult",
    "Item",
    "LoraLoadingError",
    "ModelInfo",
    "ModelLoadFailedError",
    "ModelLoadingError",
    "PoolError",
    "ProvisioningError",
    "RequestError",
    "ResourceExhaustedError",
    "SIEAsyncClient",
    "SIEClient",
    "SIEConnectionError",
    "SIEError",
    "ScoreResult",
    "ServerError",
]
