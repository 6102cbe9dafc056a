"""The request checks' errors: what the catalogue refuses before any model is touched, in the engine
and in the gateway alike."""

from __future__ import annotations

from collections.abc import Sized

from sie.errors import SieError
from sie.wire.errors import ErrorCode


class InvalidInput(SieError):
    """The request cannot be served as asked; retrying the same request will not help."""

    code = ErrorCode.INVALID_INPUT


def require_items(items: Sized) -> None:
    """Every operation needs at least one item; the message is the public server's."""
    if not len(items):
        raise InvalidInput("Field 'items' must not be empty")


class ModelNotFound(SieError):
    code = ErrorCode.MODEL_NOT_FOUND

    def __init__(self, model: str) -> None:
        super().__init__(f"Model '{model}' not found")
        self.model = model


class ModelNotServed(SieError):
    """The model's family is in the catalogue but this release does not run it: a client error that
    retrying cannot cure, and not a "not found" (the id is known and listed)."""

    code = ErrorCode.MODEL_NOT_SERVED

    def __init__(self, model: str, adapter_path: str, family: str) -> None:
        super().__init__(
            f"Model '{model}' is {family} (adapter '{adapter_path}'), a family this release does not "
            "serve; docs/models.md lists the families it runs"
        )
        self.model = model
