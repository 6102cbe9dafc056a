"""Why no weights could be had, as two types, because the cure differs (see ``docs/weights.md``).

- ``WeightsNotFound``: every tier answered and none holds the model (or the Hub said it does not
  exist). Retrying does not help until an operator copies, installs or allows something: permanent,
  the load-failure class ``NOT_FOUND``.
- ``WeightsUnavailable``: at least one tier could not be asked (the cluster store or the Hub was
  unreachable, timed out, refused the credentials, or a copy broke off) and no tier had the files. It
  may heal by itself: the load-failure class ``NETWORK``, retried after a cooldown. It derives from
  ``ConnectionError`` so a classifier that knows only the standard types gets it right too.

Both messages name every tier tried, in order, and why each gave nothing.
"""

from __future__ import annotations


class WeightsNotFound(LookupError):
    """No tier holds the model's files; the message lists what was tried."""


class WeightsUnavailable(ConnectionError):
    """A tier that might hold the files could not be reached; the message lists what was tried."""
