"""The gliner2 library's document words, found in linear time.

The library splits a text with one case-insensitive pattern, tried in this order at each non-space
character: a URL (``https?://`` or ``www.`` and every non-space after it), an e-mail address
(``[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}``), a mention (``@[a-z0-9_]+``), a word (word characters,
joined by ``-`` or ``_``), else the character alone. Its e-mail branch rescans the run of e-mail
characters ahead of every word start before failing, so a run of n of them costs O(n^2): 64 KiB of
dots takes seconds, on the thread that prepares every request. Here each run is scanned once: an
e-mail address can only start inside such a run and must take all of it (``@`` ends it), so whether
one matches, and where it ends, is the same for every start in the run. The word and mention
branches and the URL one cannot backtrack, and run as the library's pattern runs them.

``tests/adapters/test_gliner2_decide.py`` holds it equal to the library's pattern on random texts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from gliner2.processing.word_splitter import _WORD

_URL: Final = re.compile(r"https?://[^\s]+|www\.[^\s]+", re.IGNORECASE)
_LOCAL: Final = re.compile(r"[a-z0-9._%+-]+", re.IGNORECASE)
_DOMAIN: Final = re.compile(r"[a-z0-9.-]+\.[a-z]{2,}", re.IGNORECASE)
_OTHER: Final = re.compile(rf"@[a-z0-9_]+|{_WORD}+(?:[-_]{_WORD}+)*|\S", re.IGNORECASE)
_START: Final = re.compile(r"\S")


def words(text: str, lower: bool = True) -> Iterator[tuple[str, int, int]]:
    """``(word, start, end)`` as the library's ``WhitespaceTokenSplitter`` yields them (the word
    lowercased when ``lower``; offsets into ``text``)."""
    position = 0
    run_end = 0  # end of the run of e-mail characters holding the current start
    email_end: int | None = None  # where an address starting in that run ends, if one does
    while (start := _START.search(text, position)) is not None:
        begin = start.start()
        url = _URL.match(text, begin)
        if url is not None:
            end = url.end()
        else:
            if begin >= run_end:
                local = _LOCAL.match(text, begin)
                run_end, email_end = (local.end() if local else begin + 1), None
                if local is not None and text.startswith("@", run_end):
                    domain = _DOMAIN.match(text, run_end + 1)
                    email_end = domain.end() if domain else None
            if email_end is not None:
                end = email_end
            else:
                other = _OTHER.match(text, begin)
                end = other.end() if other else begin + 1
        word = text[begin:end]
        yield (word.lower() if lower else word), begin, end
        position = end
