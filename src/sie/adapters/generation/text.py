"""Generated tokens to text as they come: deltas that never split a character or show a stop string.

A byte-level tokenizer may end a token in the middle of a UTF-8 character (the decoded text then ends
in U+FFFD until the next token completes it), and a stop sequence may arrive over several tokens: the
stream holds back the incomplete character and any tail that could still become a stop sequence, and
ends the text before the first stop sequence found (OpenAI's rule: the stop sequence is not returned).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

_INCOMPLETE = "\ufffd"


class TextStream:
    def __init__(self, decode: Callable[[list[int]], str], stop: Sequence[str] = ()) -> None:
        self._decode = decode
        self._stop = tuple(s for s in stop if s)
        self._longest = max((len(s) for s in self._stop), default=0)
        self.text = ""  # what has been shown
        self.stopped = False  # a stop sequence was found: the text is final

    def push(self, tokens: list[int], final: bool = False) -> str:
        """The new text shown after the tokens so far (all of them, not only the new ones)."""
        if self.stopped:
            return ""
        whole = self._decode(tokens)
        cut = self._first_stop(whole)
        if cut is not None:
            whole, self.stopped = whole[:cut], True
        elif not final:
            whole = self._held_back(whole)
        if not whole.startswith(self.text):  # a re-merge changed earlier text: show from the change on
            common = _common_prefix(whole, self.text)
            whole = self.text + whole[common:]
        delta = whole[len(self.text) :]
        self.text = whole
        return delta

    def _first_stop(self, whole: str) -> int | None:
        if not self._stop:
            return None
        start = max(0, len(self.text) - self._longest)
        found = [i for i in (whole.find(s, start) for s in self._stop) if i >= 0]
        return min(found) if found else None

    def _held_back(self, whole: str) -> str:
        end = len(whole)
        while end > 0 and whole[end - 1] == _INCOMPLETE:
            end -= 1
        for keep in range(min(self._longest - 1, end), 0, -1):
            tail = whole[end - keep : end]
            if any(s.startswith(tail) for s in self._stop):
                end -= keep
                break
        return whole[:end]


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
