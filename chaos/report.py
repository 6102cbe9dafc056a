"""What a chaos run's requests say, fault by fault: the table docs/cluster.md shows and the checks
the tests make (every request answered once and correctly, nothing left in the streams, no dead
letters, RSS that does not keep growing)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.faults import Recovery

# A request is "disturbed" by a fault when it needed another attempt or took this many times the
# calm p99; recovery ends with the last disturbed request of the fault's window.
SLOW_FACTOR = 3.0
# What a failed attempt may be answered during a fault: busy or unreachable, try again (503), or
# no answer in time (504); anything else (a 500, a 4xx) is a defect even when a retry then succeeds.
RETRYABLE = (None, 503, 504)
# RSS over a long run: the last third's median may exceed the first third's by this much at most.
RSS_GROWTH_MB = 64.0
RSS_GROWTH_RATIO = 0.25


@dataclass
class Window:
    name: str
    start: float
    injected_after: float  # seconds from start until the fault was in place
    healed_after: float  # ... until it was healed (0 for the baseline)
    recovery: Recovery | None = None  # what the fault measured of itself
    end: float = 0.0
    broken: str | None = None  # the fault's own check that failed (the run went on)


@dataclass
class Row:
    fault: str
    sent: int
    correct: int
    retried: int
    lost: int
    wrong: int
    twice: int
    server_errors: int  # requests with an attempt answered neither 2xx nor 503/504
    disturbed_s: float  # from the fault until the last request it slowed or sent elsewhere ended
    recovery_s: float | None  # the fault's own: until the cluster was whole again
    p99_s: float
    failures: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)

    def plus(self, other: Row) -> Row:
        return Row(
            self.fault,
            self.sent + other.sent,
            self.correct + other.correct,
            self.retried + other.retried,
            self.lost + other.lost,
            self.wrong + other.wrong,
            self.twice + other.twice,
            self.server_errors + other.server_errors,
            max(self.disturbed_s, other.disturbed_s),
            max((s for s in (self.recovery_s, other.recovery_s) if s is not None), default=None),
            max(self.p99_s, other.p99_s),
            self.failures + other.failures,
            self.broken + other.broken,
        )

    def problems(self) -> list[str]:
        """What breaks the invariant in this window: the fault's own check, a request lost, wrong,
        answered twice or with an attempt answered 500 or 4xx."""
        found = [f"{self.fault}: {broken}" for broken in self.broken]
        if self.lost or self.wrong or self.twice or self.server_errors or self.correct != self.sent:
            found.append(
                f"{self.fault}: {self.lost} lost, {self.wrong} wrong, {self.twice} twice, "
                f"{self.server_errors} answered 500/4xx: {self.failures[:3]}"
            )
        return found

    def markdown(self) -> str:
        return (
            f"| {self.fault} | {self.sent} | {self.correct} | {self.retried} | {self.lost} | {self.wrong} "
            f"| {self.twice} | {self.server_errors} | {_seconds(self.recovery_s)} | {self.disturbed_s:.1f} "
            f"| {self.p99_s:.2f} |"
        )


HEADER = (
    "| fault | requests sent | answered correctly | retried | lost | wrong | answered twice "
    "| 500/4xx | recovery s | clients disturbed s | p99 s |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


@dataclass
class Report:
    rows: list[Row]
    requests: list[dict[str, Any]]
    leftovers: dict[str, Any] = field(default_factory=dict)
    rss: dict[str, list[tuple[float, int, float]]] = field(default_factory=dict)

    @classmethod
    def read(cls, records: Path, windows: list[Window]) -> Report:
        requests = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
        calm = [r["end"] - r["start"] for r in requests if _within(r, windows[0]) and len(r["tried"]) == 1]
        calm_p99 = _p99(calm) if calm else 1.0
        seen: dict[int, int] = {}
        for request in requests:
            seen[request["n"]] = seen.get(request["n"], 0) + 1
        rows = []
        for window in windows:
            mine = [r for r in requests if _within(r, window)]
            rows.append(_row(window, mine, calm_p99, seen))
        return cls(rows, requests)

    def table(self) -> str:
        """One line per fault: the windows of a fault injected several times summed (its recovery
        and p99 the worst of them)."""
        merged: dict[str, Row] = {}
        for row in self.rows:
            seen = merged.get(row.fault)
            merged[row.fault] = row if seen is None else seen.plus(row)
        return "\n".join([HEADER, *(row.markdown() for row in merged.values())])

    def problems(self) -> list[str]:
        """Everything that breaks the invariant; empty when the run kept it."""
        return [problem for row in self.rows for problem in row.problems()] + self.leftover_problems()

    def leftover_problems(self) -> list[str]:
        """What the cluster held once the load had ended and must not: work, dead letters."""
        found: list[str] = []
        for name, stream in self.leftovers.items():
            if name == "error":
                found.append(f"streams unreadable: {stream}")
            elif name.startswith("WORK_POOL_") and _holds_work(stream):
                found.append(f"work left in {name}: {stream}")
            elif name == "DEAD_LETTERS" and stream["messages"]:
                found.append(f"{stream['messages']} dead letters: an item ran out of deliveries")
        return found

    def rss_growth(self, min_span_s: float) -> list[str]:
        """Processes whose RSS kept growing over a series at least ``min_span_s`` long."""
        found = []
        for name, samples in self.rss.items():
            by_pid: dict[int, list[tuple[float, float]]] = {}
            for t, pid, mb in samples:
                by_pid.setdefault(pid, []).append((t, mb))
            for pid, series in by_pid.items():
                if len(series) < 6 or series[-1][0] - series[0][0] < min_span_s:
                    continue
                third = len(series) // 3
                first = statistics.median(mb for _, mb in series[:third])
                last = statistics.median(mb for _, mb in series[-third:])
                if last - first > max(RSS_GROWTH_MB, RSS_GROWTH_RATIO * first):
                    found.append(f"{name} (pid {pid}): {first:.0f} MB -> {last:.0f} MB")
        return found

    def rss_table(self) -> str:
        lines = ["| process | first MB | last MB | peak MB |", "|---|---|---|---|"]
        for name, samples in sorted(self.rss.items()):
            mbs = [mb for _, _, mb in samples]
            lines.append(f"| {name} | {mbs[0]:.0f} | {mbs[-1]:.0f} | {max(mbs):.0f} |")
        return "\n".join(lines)


def work_left(state: dict[str, Any]) -> bool:
    """Whether any work stream of ``state`` (``Harness.leftovers``) holds a message, or a consumer of
    it an item pending or unacked."""
    return any(_holds_work(stream) for name, stream in state.items() if name.startswith("WORK_POOL_"))


def _holds_work(stream: dict[str, Any]) -> bool:
    consumers = [c for c in stream.values() if isinstance(c, dict)]
    return bool(stream["messages"]) or any(c["pending"] or c["ack_pending"] for c in consumers)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _within(request: dict[str, Any], window: Window) -> bool:
    return bool(window.start <= request["start"] < window.end)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


def _row(window: Window, mine: list[dict[str, Any]], calm_p99: float, seen: dict[int, int]) -> Row:
    injected = window.start + window.injected_after
    disturbed = [
        r
        for r in mine
        if len(r["tried"]) > 1 or not r.get("ok") or r["end"] - r["start"] > SLOW_FACTOR * calm_p99
    ]
    lasted = max((r["end"] - injected for r in disturbed), default=0.0) if window.healed_after else 0.0
    failures = [f"#{r['n']} {r.get('error') or r.get('mismatch')}" for r in mine if not r.get("ok")]
    server_errors = [r for r in mine if any(s not in RETRYABLE for s in r.get("statuses", []))]
    failures += [f"#{r['n']} {r['statuses']}: {r['errors']}" for r in server_errors]
    return Row(
        fault=window.name,
        sent=len(mine),
        correct=sum(1 for r in mine if r.get("ok")),
        retried=sum(1 for r in mine if len(r["tried"]) > 1),
        lost=sum(1 for r in mine if not r.get("ok") and r.get("error")),
        wrong=sum(1 for r in mine if r.get("mismatch")),
        twice=sum(1 for r in mine if seen[r["n"]] > 1),
        server_errors=len(server_errors),
        disturbed_s=max(lasted, 0.0),
        recovery_s=window.recovery.seconds if window.recovery else None,
        p99_s=_p99([r["end"] - r["start"] for r in mine]),
        failures=failures,
        broken=[window.broken] if window.broken else [],
    )
