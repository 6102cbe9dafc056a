"""``overflow_policy: error`` for the families that truncate to their window: an input that would be
cut is refused instead, one item at a time (``Prepared.refused`` with ``INPUT_TOO_LONG``).

The engine decides what a refusal means for the request: an extraction answers the other items and
carries the error on that one; encode and score fail the request with it (400 ``INPUT_TOO_LONG``,
which the public SDK raises as ``InputTooLongError``). Under ``default`` and ``truncate_text`` the
family truncates as it always has, and nothing here runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sie.adapters.batch import Prepared
from sie.adapters.contract import Forward
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.core.extraction import ItemError
from sie.core.options import OverflowPolicy
from sie.wire.errors import ErrorCode


def past_window_error(tokens: int, window: int, *, at_least: bool = False) -> ItemError:
    """The refusal of one input: its whole length against the window, and the two remedies. The item's
    place is the front end's to add (``sie.engine.errors.RefusedItem``): a queue worker sees one item.
    ``at_least``: ``tokens`` counts only a bounded prefix of the input (a family that never tokenizes
    all of a huge text), so the length is a lower bound."""
    length = f"at least {tokens}" if at_least else str(tokens)
    return ItemError(
        ErrorCode.INPUT_TOO_LONG.value,
        f"The input takes {length} tokens, past the model's {window}-token window, and "
        "options.overflow_policy is 'error'. Shorten it, or send overflow_policy 'truncate_text'.",
    )


def refusal(forward: Forward, tokens: int, window: int | None, *, at_least: bool = False) -> ItemError | None:
    """For a family that lays an input out itself (a prompt, a template, rows around the text) and
    cuts it to fit: the refusal of an input that takes ``tokens`` laid out whole, past ``window``,
    when ``forward``'s policy is ``error``; None when it fits, the window is unbounded, or the
    policy lets the family cut it."""
    if forward.overflow is not OverflowPolicy.ERROR or window is None or tokens <= window:
        return None
    return past_window_error(tokens, window, at_least=at_least)


def refusals(
    tokenizer: TextTokenizer, inputs: Sequence[str | tuple[str, str]], forward: Forward
) -> dict[int, ItemError]:
    """The inputs ``forward`` refuses for not fitting ``tokenizer``'s window whole (texts, or pairs
    counted with the template's separators), by index; none unless its policy is ``error``."""
    if forward.overflow is not OverflowPolicy.ERROR or tokenizer.max_length is None:
        return {}
    window = tokenizer.max_length
    return {
        index: past_window_error(tokens, window) for index, tokens in tokenizer.past_window(inputs).items()
    }


def within_window(prepared: list[Prepared], refused: Mapping[int, ItemError]) -> list[Prepared]:
    """``prepared`` with each refused item in its place."""
    if not refused:
        return prepared
    return [Prepared.refused(refused[i]) if i in refused else item for i, item in enumerate(prepared)]
