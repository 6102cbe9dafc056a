"""The requests a chaos run sends, as templates the load client cycles through: encode, score and
extract, each with 1 and with 32 items, over distinct texts so that a misrouted answer cannot pass
for the right one. Fixed and seeded: the expected answers are computed once per run."""

from __future__ import annotations

import random
from typing import Any, Final

from chaos import models

SIZES: Final = (1, 32)
PER_KIND: Final = 4  # templates of each kind and size

_NAMES: Final = ["Ada Lovelace", "Grace Hopper", "Alan Turing", "Katherine Johnson", "Linus Torvalds"]
_PLACES: Final = ["London", "Arlington", "Manchester", "Hampton", "Helsinki", "Zurich", "Lagos"]
_ORGS: Final = ["the Royal Society", "the Navy", "NASA", "the University of Manchester", "CERN"]
_VERBS: Final = ["visited", "wrote to", "worked with", "left", "joined", "spoke at"]


def sentence(rng: random.Random, number: int) -> str:
    return (
        f"{rng.choice(_NAMES)} {rng.choice(_VERBS)} {rng.choice(_ORGS)} in {rng.choice(_PLACES)} "
        f"on day {number} of the outage drill."
    )


def templates(seed: int = 38) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    counter = iter(range(1_000_000))
    found: list[dict[str, Any]] = []
    for size in SIZES:
        for _ in range(PER_KIND):
            texts = [sentence(rng, next(counter)) for _ in range(size)]
            found.append({"kind": "encode", "size": size, "model": models.ENCODER, "texts": texts})
            docs = [sentence(rng, next(counter)) for _ in range(size)]
            query = f"who {rng.choice(_VERBS)} {rng.choice(_ORGS)}?"
            found.append(
                {"kind": "score", "size": size, "model": models.RERANKER, "query": query, "docs": docs}
            )
            texts = [sentence(rng, next(counter)) for _ in range(size)]
            found.append(
                {
                    "kind": "extract",
                    "size": size,
                    "model": models.EXTRACTOR,
                    "texts": texts,
                    "labels": models.LABELS,
                }
            )
    # Interleaved, so that every stretch of the run sends every kind and size.
    rng.shuffle(found)
    return found
