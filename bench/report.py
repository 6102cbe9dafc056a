"""Printing: a line per cell as it finishes, then per-server resources, gates, ratios and the final
markdown summary (the block pasted into docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.correctness import GateResult
from bench.results import RunResult, ServerRun
from bench.stats import CellResult

CELL_HEADER = (
    f"{'server':9s} {'cell':24s} {'items/s':>9s} {'tokens/s':>9s} {'p50 ms':>8s} {'p95 ms':>8s} "
    f"{'p99 ms':>8s} {'reqs':>6s} {'secs':>6s} {'srv cpu s':>9s} {'cores':>5s} {'gen':>5s} {'other':>5s} {'errors':>6s}"
)


def _errors(cell: CellResult) -> str:
    return f"{cell.errors} ({cell.non_2xx} non-2xx)" if cell.non_2xx else str(cell.errors)


def cell_line(cell: CellResult) -> str:
    line = (
        f"{cell.server:9s} {cell.spec.key:24s} {cell.items_per_s:9.1f} {cell.tokens_per_s:9.0f} "
        f"{cell.p50_ms:8.2f} {cell.p95_ms:8.2f} {cell.p99_ms:8.2f} {cell.requests:6d} {cell.elapsed_s:6.1f} "
        f"{cell.server_cpu_s:9.2f} {cell.server_cores:5.2f} {cell.bench_cpu_s / cell.elapsed_s:5.2f} "
        f"{cell.other_cpu_s / cell.elapsed_s:5.2f} "
        f"{cell.errors:6d}"
    )
    if cell.statuses:
        line += "  http " + ",".join(f"{code}x{n}" for code, n in sorted(cell.statuses.items()))
    if cell.error_sample:
        line += f"  first error: {cell.error_sample[:120]}"
    return line


def gate_line(gate: GateResult) -> str:
    verdict = "PASS" if gate.passed else "FAIL"
    return (
        f"  gate {gate.server}/{gate.client}: {verdict}  min cosine {gate.min_cosine:.5f} "
        f"(>= {gate.threshold}; {gate.below_threshold} below), recall@10 {gate.recall_at_10:.3f} "
        f"(float32 reference {gate.reference_recall_at_10:.3f}), top-10 lists differing: "
        f"{gate.top10_lists_differ}/{gate.queries} ordered, {gate.top10_sets_differ}/{gate.queries} as sets"
    )


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _server_rows(server: ServerRun) -> list[str]:
    rows = []
    for cell in server.cells:
        rows.append(
            f"| {server.label} | {cell.spec.client} | {cell.spec.concurrency} | {cell.spec.batch}"
            f"{' (10-word)' if cell.spec.pool == 'queries' else ''} | {cell.items_per_s:.1f} | "
            f"{cell.tokens_per_s:.0f} | {cell.p50_ms:.1f} | "
            f"{cell.p95_ms:.1f} | {cell.p99_ms:.1f} | {cell.server_cores:.2f} | {_errors(cell)} |"
        )
    return rows


def summary_markdown(run: RunResult) -> str:
    cfg = run.config
    lines = [
        f"Run: server `{cfg.get('server_version', '?')}`, model `{cfg['model']}`, precision `{cfg['precision']}`, corpus {run.corpus['texts']} texts "
        f"(seed {cfg['seed']}, {run.corpus['tokens']} tokens, mean {run.corpus['mean_tokens']:.1f}), "
        f"{cfg['items']} items per cell (single-item cells: {cfg['items'] // 4} requests), "
        f"{run.machine['cores']} cores "
        f"({run.machine['cpu']}, {run.machine.get('cpu_isa', '?')}){', quick' if cfg['quick'] else ''}.",
        "",
        "| raw sentence-transformers | best batch | items/s | tokens/s | 1 query p50 ms |",
        "|---|---|---|---|---|",
    ]
    for precision, raw in run.raw.items():
        lines.append(
            f"| {precision} | {raw.best_batch_size} | {raw.items_per_s:.1f} | {raw.tokens_per_s:.0f} | "
            f"{raw.single_query_p50_ms:.2f} |"
        )
    lines += [
        "",
        "| server | client | concurrency | items/request | items/s | tokens/s | p50 ms | p95 ms | p99 ms "
        "| server cores | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for server in run.servers:
        lines += _server_rows(server)
    lines += [
        "",
        "| server | startup s | idle RSS MB | peak RSS MB | RSS after run MB | correctness |",
        "|---|---|---|---|---|---|",
    ]
    for server in run.servers:
        gates = "; ".join(
            f"{g.client}: {'pass' if g.passed else 'FAIL'} (min cos {g.min_cosine:.4f}, "
            f"R@10 {g.recall_at_10:.3f}, {g.top10_lists_differ} top-10 differ)"
            for g in server.gates
        )
        lines.append(
            f"| {server.label} | {server.startup_s:.1f} | {server.idle_rss_mb:.0f} | "
            f"{server.peak_rss_mb:.0f} | {server.settled_rss_mb:.0f} | {gates} |"
        )
    if run.rounds:
        names = [*run.rounds[0].raw, *run.rounds[0].servers]
        lines += ["", "| paired round | " + " | ".join(f"{n} items/s" for n in names) + " |"]
        lines.append("|---" * (len(names) + 1) + "|")
        for index, measured in enumerate(run.rounds, 1):
            values = [*measured.raw.values(), *measured.servers.values()]
            lines.append(f"| {index} | " + " | ".join(f"{v:.1f}" for v in values) + " |")
    lines += ["", "| ratio | value | target | met |", "|---|---|---|---|"]
    for ratio in run.ratios:
        met = "" if ratio.met is None else ("yes" if ratio.met else "**no**")
        lines.append(f"| {ratio.name} | {_fmt(ratio.value)} | {ratio.target} | {met} |")
    return "\n".join(lines)


def print_servers(run: RunResult) -> None:
    print("\n== servers ==")
    for server in run.servers:
        total_cpu = sum(c.server_cpu_s for c in server.cells)
        print(
            f"{server.label}: startup {server.startup_s:.1f} s, idle RSS {server.idle_rss_mb:.0f} MB, "
            f"peak RSS (VmHWM) {server.peak_rss_mb:.0f} MB, RSS after the run {server.settled_rss_mb:.0f} MB, "
            f"CPU in timed cells {total_cpu:.1f} s"
        )
        for note in server.notes:
            print(f"  {note}")
        for gate in server.gates:
            print(gate_line(gate))


def print_ratios(run: RunResult) -> None:
    print("\n== ratios and targets ==")
    for ratio in run.ratios:
        met = "" if ratio.met is None else ("  [met]" if ratio.met else "  [MISSED]")
        target = f"  target {ratio.target}" if ratio.target else ""
        print(f"{ratio.name:64s} {_fmt(ratio.value):>8s}{target}{met}")


def write_json(run: RunResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run.to_json(), indent=2) + "\n")
