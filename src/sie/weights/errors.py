"""Why no weights could be had, as two types, because the cure differs (see ``docs/weights.md``).

- ``WeightsNotFound``: every tier answered and none holds the model (or the Hub said it does not
  exist). Retrying does not help until an operator copies, installs or allows something: permanent,
  the load-failure class ``NOT_FOUND``.
- ``WeightsUnavailable``: at least one tier could not be asked (the cluster store or the Hub was
  unreachable, timed out, refused the credentials, or a copy broke off) and no tier had the files. It
  may heal by itself: the load-failure class ``NETWORK``, retried after a cooldown. It derives from
  ``ConnectionError`` so a classifier that knows only the standard types gets it right too.

Both messages name every tier tried, in order, and why each gave nothing. They are for the operator's
log: a client is told the load-failure class and a generic text (``engine.load_errors``).

``TooLarge`` is one tier's refusal, not a miss: the files are there but over the cap a fetch may take
(``WeightSources.max_fetch_bytes``, the LoRAs' ``SIE_LORA_MAX_BYTES``); the resolve records it and goes
on to the next tier.
"""

from __future__ import annotations


class WeightsNotFound(LookupError):
    """No tier holds the model's files; the message lists what was tried. ``remedy`` is what an
    operator can run to fix it when that names nothing of the server's (no path, cache or bucket): a
    client is told it, since it is the one thing worth telling."""

    def __init__(self, message: str, remedy: str | None = None) -> None:
        super().__init__(message)
        self.remedy = remedy


class WeightsUnavailable(ConnectionError):
    """A tier that might hold the files could not be reached; the message lists what was tried."""


class TooLarge(Exception):
    """A copy or download was refused before it started: its files are over the fetch cap."""
