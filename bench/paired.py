"""Paired rounds: the raw limits and every server's saturated cell, timed back to back, several times.

This VM's speed drifts by up to +-10% over minutes, more than the gaps the targets ask about, so a
ratio of two timings taken minutes apart measures the drift as much as the server (the same code
read 0.89x and 0.97x the raw limit in two runs). A round times each raw limit and each server's
saturated cell one right after the other, with every server already warm and idle while the others
run; a target ratio is the median over rounds of the ratio within each round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from bench.clients import Sender
from bench.corpus import Corpus
from bench.load import Budget, run_cell
from bench.raw import RawModel, throughput
from bench.stats import CellSpec


@dataclass
class Round:
    raw: dict[str, float]  # precision -> items/s over the whole corpus at its best batch size
    servers: dict[str, float]  # server name -> items/s of its saturated cell


@dataclass(frozen=True)
class RawLimit:
    precision: str
    model: RawModel
    batch_size: int


@dataclass(frozen=True)
class Contender:
    name: str  # "sie" or "infinity"
    pid: int
    sender: Sender
    spec: CellSpec  # its saturated cell


async def run_rounds(
    count: int,
    limits: list[RawLimit],
    contenders: list[Contender],
    data: Corpus,
    budget: Budget,
    log: Callable[[str], None],
) -> list[Round]:
    rounds: list[Round] = []
    for index in range(count):
        measured = Round({}, {})
        for limit in limits:
            timing = throughput(limit.model, data.texts, data.tokens_total, limit.batch_size)
            measured.raw[limit.precision] = timing.items_per_s
        for contender in contenders:
            cell = await run_cell(
                contender.name,
                contender.pid,
                contender.sender,
                contender.spec,
                data.texts,
                data.text_tokens,
                budget,
            )
            if cell.errors:
                raise RuntimeError(
                    f"{contender.name} answered errors in paired round {index + 1}: {cell.error_sample}"
                )
            measured.servers[contender.name] = cell.items_per_s
        rounds.append(measured)
        parts = [f"raw {k} {v:.1f}" for k, v in measured.raw.items()]
        parts += [f"{k} {v:.1f}" for k, v in measured.servers.items()]
        log(f"  round {index + 1}/{count}: " + ", ".join(parts) + " items/s")
    return rounds


def median_ratio(rounds: list[Round], numerator: str, denominator: str) -> float | None:
    """Median over rounds of ``servers[numerator]`` divided by ``servers[denominator]`` or, when no
    server has that name, by ``raw[denominator]``; None when a side is missing."""
    ratios = []
    for measured in rounds:
        top = measured.servers.get(numerator)
        bottom = measured.servers.get(denominator, measured.raw.get(denominator))
        if top is None or not bottom:
            return None
        ratios.append(top / bottom)
    return statistics.median(ratios) if ratios else None
