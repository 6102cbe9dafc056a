"""A request's own checks: everything that needs the catalogue but no loaded model.

The engine runs them before it touches a model, and the cluster's gateway runs the very same checks
before it publishes anything, so a bad request gets the standalone server's 4xx from either front end
(and never costs a worker a message).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import msgspec

from sie.catalog.catalog import Catalog, CatalogEntry
from sie.catalog.errors import InvalidInput, ModelNotFound, ModelNotServed, require_items
from sie.catalog.families import not_served
from sie.catalog.options import CustomOptions, check_lora
from sie.wire import codec
from sie.wire.requests import Item

T = TypeVar("T")
# Request shapes (an operation, a model, its encoded params) whose checked plan an ``Admission``
# keeps, and the longest shape kept: a caller choosing new shapes, or huge options, costs a plan
# each time, never memory.
PLANS_KEPT: Final = 256
PLAN_KEY_BYTES: Final = 1024


@dataclass(frozen=True)
class RequestLimits:
    """What one request may hold, the same on the server and the gateway."""

    max_item_text_bytes: int = 2 * 1024 * 1024  # SIE_MAX_ITEM_TEXT_BYTES
    max_items: int = 512  # SIE_MAX_ITEMS_PER_REQUEST


class TooManyItems(InvalidInput):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"Request has more than {limit} items; at most {limit} per request (SIE_MAX_ITEMS_PER_REQUEST). "
            "Split the request."
        )


@dataclass(frozen=True)
class Admission:
    """One catalogue's request checks. It also keeps the plans it made (``planned``): a plan is a
    function of the catalogue and the request's shape, and rebuilding it was a tenth of a lone
    request's CPU on the server; a new catalogue (hot reload) comes with a new ``Admission``."""

    catalog: Catalog
    limits: RequestLimits
    custom_options: CustomOptions | None = None  # a custom adapter's options (``options.check_known``)
    _plans: dict[tuple[str, str, bytes], Any] = field(default_factory=dict, compare=False, repr=False)

    def planned(self, operation: str, model: str, params: object, plan: Callable[[], T]) -> T:
        """``plan()`` once per request shape (``operation``, ``model``, its ``params`` as msgpack), then
        what it returned; a plan that raises is not kept, so a refused shape is refused alike each time.
        Params past ``PLAN_KEY_BYTES``, or that msgpack cannot hold (an integer wider than 64 bits, which
        only a JSON body carries), are planned afresh."""
        try:
            shape = b"" if params is None else _MSGPACK.encode(params)
        except OverflowError:
            return plan()
        if len(shape) > PLAN_KEY_BYTES:
            return plan()
        key = (operation, model, shape)
        kept = self._plans.get(key)
        if kept is None:
            if len(self._plans) >= PLANS_KEPT:
                self._plans.clear()
            kept = self._plans[key] = plan()
        return kept

    def count(
        self, body: bytes, content_type: str | None, field: str = "items", *, objects: bool = True
    ) -> None:
        """Refuse a body whose ``field`` holds more items than a request may, before it is decoded:
        the first check of every inference route, so a million items cost a scan, not a million
        objects (nor a million tokenizations, nor a million queue messages)."""
        if codec.longer_than(body, content_type, field, self.limits.max_items, objects=objects):
            raise TooManyItems(self.limits.max_items)

    def require(self, model: str) -> CatalogEntry:
        entry = self.catalog.get(model)
        if entry is None:
            raise ModelNotFound(model)
        return entry

    def variant(self, model: str, profile: object) -> str:
        """The catalog id serving ``options.profile`` (a ``{sie_id}:{profile}`` variant) or ``model``."""
        entry = self.require(model)
        if profile is not None and not isinstance(profile, str):
            raise InvalidInput(f"Option 'profile' must be str, got {type(profile).__name__}")
        variant = self.catalog.for_profile(model, profile)
        if variant not in self.catalog:
            available = ", ".join(sorted(entry.config.profiles))
            raise InvalidInput(f"Unknown profile '{profile}' for model '{model}'. Available: {available}")
        return variant

    def entry(
        self,
        model: str,
        items: Sequence[Item],
        options: Mapping[str, Any] | None,
        query: Item | None = None,
    ) -> CatalogEntry:
        """The entry that serves a request (the variant its ``profile`` option names), once the
        request's items passed their checks."""
        self.items(items, query)
        return self.served(model, options)

    def served(self, model: str, options: Mapping[str, Any] | None) -> CatalogEntry:
        """``entry`` without the items' checks: the variant, a family this release runs, its LoRA."""
        entry = self.require(self.variant(model, (options or {}).get("profile")))
        family = not_served(entry.profile.adapter_path)
        if family is not None:
            raise ModelNotServed(entry.name, entry.profile.adapter_path, family)
        check_lora(entry, options)
        return entry

    def items(self, items: Sequence[Item], query: Item | None = None) -> None:
        """Items present, none past ``SIE_MAX_ITEM_TEXT_BYTES`` (``item_size_error``), no audio, video
        or document: no family here reads them, and an item's text must not be answered as if they
        had been seen."""
        require_items(items)
        if len(items) > self.limits.max_items:  # a body decoded elsewhere (a work item, a payload)
            raise TooManyItems(self.limits.max_items)
        named = [(None, query)] if query is not None else []
        for index, item in [*named, *enumerate(items)]:
            if item.audio is None and item.video is None and item.document is None:
                continue
            kind = next(k for k in ("audio", "video", "document") if getattr(item, k) is not None)
            label = "Query" if index is None else f"Item {index}"
            raise InvalidInput(
                f"{label} carries {kind}: this release reads text and images; "
                "audio, video and document inputs are not served"
            )
        limit = self.limits.max_item_text_bytes
        error = item_size_error(query, "query", limit) if query is not None else None
        if error is not None:
            raise InvalidInput(error)
        self.sizes(items, "items")

    def sizes(self, items: Sequence[Item], field: str) -> None:
        """No item past ``SIE_MAX_ITEM_TEXT_BYTES``, named as the request names it (``items[3]``, an
        OpenAI route's ``input[3]`` or ``documents[3]``)."""
        limit = self.limits.max_item_text_bytes
        for i, item in enumerate(items):
            error = item_size_error(item, f"{field}[{i}]", limit)
            if error is not None:
                raise InvalidInput(error)


def item_size_error(item: Item, field: str, limit: int) -> str | None:
    """Why ``item`` carries too much text, in the public server's words, or None: the UTF-8 bytes of
    its text and, when those fit, its metadata's msgpack size, against ``limit``
    (``SIE_MAX_ITEM_TEXT_BYTES``). A 400 ``INVALID_INPUT``, as the public server answers it, before
    anything tokenizes, prices or queues the item."""
    text = item.text or ""
    # An ASCII text is a byte a character, and one longer than the limit in characters is longer in
    # bytes too: only the rest is encoded.
    size = len(text) if len(text) > limit or text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size <= limit and item.metadata:
        size += _encoded_size(item.metadata)
    if size <= limit:
        return None
    what = "text and metadata" if item.metadata else "text"
    return f"Field '{field}' must hold at most {limit} bytes of UTF-8 {what}"


_MSGPACK: Final = msgspec.msgpack.Encoder()


def _encoded_size(metadata: dict[str, Any]) -> int:
    try:
        return len(_MSGPACK.encode(metadata))
    except OverflowError:  # an integer wider than 64 bits, which only a JSON body carries
        return len(msgspec.json.encode(metadata))
