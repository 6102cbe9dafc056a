"""What a running generation reports, whichever engine runs it (``continuous`` or ``padded``): the
routes read every request the same way, as an async iterator of ``Progress`` they may ``close``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from sie.adapters.generation.sampling import TokenLogprob


@dataclass(frozen=True)
class Progress:
    """What a request has produced so far: every generated token (the end-of-sequence token included
    when it came), the logprobs of those not reported before, and whether it is over."""

    tokens: list[int]
    logprobs: list[TokenLogprob]
    finished: bool
    error: str | None = None


class Generation(Protocol):
    """One request, read once; ``close`` cancels it (a client that went away) and frees its place.
    Closing a finished or closed request does nothing."""

    def __aiter__(self) -> AsyncIterator[Progress]: ...

    async def __anext__(self) -> Progress: ...

    def close(self) -> None: ...
