"""The engine's own exceptions: loading, batching and running models. The request checks' errors
(``InvalidInput`` and the rest) are the catalogue's (``sie.catalog.errors``); every one of them names
its wire code, and ``sie.errors.RULES`` says the rest."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from sie.core.extraction import ItemError
from sie.errors import LOAD_FAILED_HERE, ErrorRule, Relayed, SieError
from sie.wire.errors import ErrorCode

_P = ParamSpec("_P")
_T = TypeVar("_T")


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


class ModelLoading(SieError):
    """The model is loading in the background; the caller should retry shortly."""

    code = ErrorCode.MODEL_LOADING

    def __init__(self, model: str) -> None:
        super().__init__(f"Model '{model}' is loading. Retry shortly.")
        self.model = model


class LoraLoading(SieError):
    """A LoRA adapter is loading in the background; the caller should retry in a second."""

    code = ErrorCode.LORA_LOADING

    def __init__(self, model: str, lora: str) -> None:
        super().__init__(f"LoRA '{lora}' for model '{model}' is loading. Retry shortly.")
        self.model = model
        self.lora = lora


class ModelLoadFailed(SieError):
    """A recorded load failure: ``reason`` is the class's generic text (``load_errors.told``), never the
    loader's exception, whose folders, cache paths and bucket URLs stay in the log."""

    code = ErrorCode.MODEL_LOAD_FAILED

    def __init__(self, model: str, reason: str, attempts: int, permanent: bool, error_class: str) -> None:
        super().__init__(f"Model '{model}' failed to load ({error_class}): {reason}")
        self.model = model
        self.reason = reason
        self.attempts = attempts
        self.permanent = permanent
        self.error_class = error_class

    def details(self) -> dict[str, Any]:
        return {"error_class": self.error_class, "attempts": self.attempts, "permanent": self.permanent}

    def rule(self) -> ErrorRule:
        """A permanent failure is every worker's (the table's: answered). One that may heal is this
        worker's: a queue worker NAKs the item so that another worker may serve it, and answers it
        with this error only once it cannot wait any longer (``worker.work``)."""
        return super().rule() if self.permanent else LOAD_FAILED_HERE


class Overloaded(SieError):
    """The model's queue is full; the caller should back off and retry."""

    code = ErrorCode.QUEUE_FULL


class OutOfMemory(Exception):
    """Internal, between the runner and its worker: a forward ran out of memory twice (once more after
    freeing caches), and the worker decides what to try next. Callers see ``ResourceExhausted``."""


class ResourceExhausted(SieError):
    """A batch ran out of device memory even after recovery (freed caches, an evicted model, split
    batches); the caller may retry later (``SIE_OOM_RECOVERY__RETRY_AFTER_S``), when the device has
    room."""

    code = ErrorCode.RESOURCE_EXHAUSTED

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self._retry_after_s = retry_after_s

    @property
    def retry_after_s(self) -> int | None:
        return self._retry_after_s if self._retry_after_s is not None else self.rule().retry_after_s


class InferenceFailed(SieError):
    """The forward pass raised; the original exception is chained."""

    code = ErrorCode.INFERENCE_ERROR


class EngineClosed(SieError):
    """The engine is shutting down and takes no new work."""

    code = ErrorCode.MODEL_NOT_LOADED


class RefusedItem(Relayed):
    """An item its family refused on its own (``Prepared.refused``) in an operation whose response has
    no per-item error (encode, score): the request fails with that item's code and message, as the
    public server fails it (an input past the window under ``overflow_policy: error`` is a 400
    ``INPUT_TOO_LONG``). Extraction answers such an item in its ``error`` instead.

    The message names the item by its place in the request (``index``; None is a score's query), which
    only the front end knows: a queue worker runs one item of an encode and ``shifted`` puts it back.
    An instance answers with its item's code; the class names the one families refuse with, which the
    server's OpenAPI document lists."""

    code = ErrorCode.INPUT_TOO_LONG

    def __init__(self, error: ItemError, index: int | None = 0) -> None:
        where = "Query" if index is None else f"Item {index}"
        super().__init__(error.code, f"{where}: {error.message}")
        self.error = error
        self.index = index

    def shifted(self, offset: int) -> RefusedItem:
        """The same refusal, the item ``offset`` places further on (a work item's ``item_index``)."""
        return RefusedItem(self.error, None if self.index is None else self.index + offset)


class InputTooLong(SieError):
    """A generation prompt that leaves the model's window no room for the tokens asked for."""

    code = ErrorCode.INPUT_TOO_LONG


class OutputParseError(SieError):
    """A ``strict`` grammar's finished output that does not parse or match."""

    code = ErrorCode.MODEL_OUTPUT_PARSE_ERROR


class GenerationTimeout(SieError):
    """A generation past one of its profile's deadlines (``adapter_options.runtime``): no first token
    within ``first_chunk_timeout_s``, a stream's next token not within ``inter_chunk_timeout_s``, or no
    end within ``overall_timeout_s``. It is cancelled in its batch; what it made so far is dropped
    (a stream's client has it already)."""

    code = ErrorCode.GENERATION_TIMEOUT
