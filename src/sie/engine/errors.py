"""The engine's own exceptions. Front ends map them to wire codes in one table each."""

from __future__ import annotations

from collections.abc import Callable, Sized
from functools import wraps
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")


class EngineError(Exception):
    """Base of every error the engine reports to a caller."""


class InvalidInput(EngineError):
    """The request cannot be served as asked; retrying the same request will not help."""


def require_items(items: Sized) -> None:
    """Every operation needs at least one item; the message is the public server's."""
    if not len(items):
        raise InvalidInput("Field 'items' must not be empty")


def future_safe(call: Callable[_P, _T]) -> Callable[_P, _T]:
    """``call`` with a StopIteration it raises turned into a RuntimeError. asyncio cannot set
    StopIteration on a future, so one escaping an adapter run on a thread (a library's bare ``next``)
    would leave its request waiting forever instead of failing it."""

    @wraps(call)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return call(*args, **kwargs)
        except StopIteration as exc:
            raise RuntimeError(f"{getattr(call, '__qualname__', call)!s} raised StopIteration") from exc

    return guarded


class ModelNotFound(EngineError):
    def __init__(self, model: str) -> None:
        super().__init__(f"Model '{model}' not found")
        self.model = model


class ModelNotServed(EngineError):
    """The model's family is in the catalogue but this release does not run it: a client error that
    retrying cannot cure, and not a "not found" (the id is known and listed)."""

    def __init__(self, model: str, adapter_path: str, family: str) -> None:
        super().__init__(
            f"Model '{model}' is {family} (adapter '{adapter_path}'), a family this release does not "
            "serve; docs/models.md lists the families it runs"
        )
        self.model = model


class ModelLoading(EngineError):
    """The model is loading in the background; the caller should retry shortly."""

    def __init__(self, model: str) -> None:
        super().__init__(f"Model '{model}' is loading. Retry shortly.")
        self.model = model


class LoraLoading(EngineError):
    """A LoRA adapter is loading in the background; the caller should retry in a second."""

    def __init__(self, model: str, lora: str) -> None:
        super().__init__(f"LoRA '{lora}' for model '{model}' is loading. Retry shortly.")
        self.model = model
        self.lora = lora


class ModelLoadFailed(EngineError):
    def __init__(self, model: str, reason: str, attempts: int, permanent: bool, error_class: str) -> None:
        super().__init__(f"Model '{model}' failed to load: {reason}")
        self.model = model
        self.reason = reason
        self.attempts = attempts
        self.permanent = permanent
        self.error_class = error_class


class Overloaded(EngineError):
    """The model's queue is full; the caller should back off and retry."""


class OutOfMemory(Exception):
    """Internal, between the runner and its worker: a forward ran out of memory twice (once more after
    freeing caches), and the worker decides what to try next. Callers see ``ResourceExhausted``."""


class ResourceExhausted(EngineError):
    """A batch ran out of device memory even after recovery (freed caches, an evicted model, split
    batches); the caller may retry later, when the device has room."""


class InferenceFailed(EngineError):
    """The forward pass raised; the original exception is chained."""


class EngineClosed(EngineError):
    """The engine is shutting down and takes no new work."""


class PayloadTooLarge(EngineError):
    """The body or one item's text is over its configured limit."""
