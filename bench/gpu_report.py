"""Printing a device run: the markdown summary (the block pasted into docs/benchmarks.md), the
targets with met / NOT MET, and the JSON file."""

from __future__ import annotations

import json
from pathlib import Path

from bench.gpu_memory import PER_PROCESS
from bench.gpu_results import DeviceRun, ServerResult, ShapeResult
from bench.stats import CellResult


def _num(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _percent(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{100 * fraction:.1f}%"


def cell_label(cell: CellResult) -> str:
    spec = cell.spec
    pool = " 10-word" if spec.pool == "queries" else ""
    return f"{spec.concurrency} x {spec.batch}{pool} ({spec.client})"


def _header(run: DeviceRun) -> str:
    m, c, cfg = run.machine, run.corpus, run.config
    return (
        f"Run: {m['gpu']} ({cfg['device']}), {m['cores']} cores, torch {m['torch']} (CUDA {m['cuda']}), "
        f"transformers {m['transformers']}, sentence-transformers {m['sentence_transformers']}; corpus "
        f"{c['texts']} texts (seed {cfg['seed']}, {c['tokens']} tokens, mean {c['mean_tokens']:.1f}, "
        f"token-weighted mean {c['token_weighted_mean_tokens']:.1f}); peak {_num(run.peak_tflops, 0)} "
        f"TFLOP/s; load generator {cfg['loadgen_processes']} process(es); {cfg['elapsed_s']:.0f} s."
    )


def _raw_rows(run: DeviceRun, shape: ShapeResult) -> list[str]:
    rows = []
    for precision, measured in shape.raw.items():
        rows.append(
            f"| {shape.shape} | {precision} | {measured.best_batch_size} | {measured.items_per_s:.1f} | "
            f"{measured.tokens_per_s:.0f} | {_percent(run.peak_fraction(shape, measured.tokens_per_s))} | "
            f"{measured.single_query_p50_ms:.2f} | {_num(shape.raw_min_cos.get(precision), 6)} |"
        )
    return rows


def _cell_rows(run: DeviceRun, shape: ShapeResult, server: ServerResult) -> list[str]:
    rows = []
    for cell in server.cells:
        fraction = run.peak_fraction(shape, cell.tokens_per_s, cell.spec.pool)
        errors = f"{cell.errors} ({cell.non_2xx} non-2xx)" if cell.non_2xx else str(cell.errors)
        rows.append(
            f"| {shape.shape} | {server.precision} | {cell_label(cell)} | {cell.items_per_s:.1f} | "
            f"{cell.tokens_per_s:.0f} | {_percent(fraction)} | {cell.p50_ms:.2f} | {cell.p99_ms:.2f} | "
            f"{cell.requests} | {errors} |"
        )
    return rows


def _server_row(shape: ShapeResult, server: ServerResult) -> str:
    a = server.agreement
    how = "" if server.gpu_memory_how in (PER_PROCESS, "n/a") else " (whole GPU)"
    vectors = (
        f"{a.min_cos_alone:.6f} | {a.min_cos_batched:.6f} | {a.min_cos_alone_vs_batched:.6f} | "
        f"{a.identical}/{a.texts}"
        if a
        else "n/a | n/a | n/a | n/a"
    )
    return (
        f"| {shape.shape} | {server.precision} | {server.effective_precision or 'n/a'} | "
        f"{server.startup_s:.1f} | {_num(server.gpu_memory_idle_mb, 0)}{how} | "
        f"{_num(server.gpu_memory_peak_mb, 0)}{how} | {vectors} | {server.error[:80] or 'ok'} |"
    )


def summary_markdown(run: DeviceRun) -> str:
    lines = [
        _header(run),
        "",
        "| shape | raw precision | best batch | items/s | tokens/s | of peak | 1 query p50 ms "
        "| min cos to float32 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape in run.shapes:
        lines += _raw_rows(run, shape)
    lines += [
        "",
        "| shape | server | cell (concurrency x items) | items/s | tokens/s | of peak | p50 ms | p99 ms "
        "| requests | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in run.shapes:
        for server in shape.servers:
            lines += _cell_rows(run, shape, server)
    lines += [
        "",
        "| shape | server | ran as | startup s | GPU MB idle | GPU MB peak | min cos alone | min cos batched "
        "| alone vs batched | identical | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in run.shapes:
        lines += [_server_row(shape, server) for server in shape.servers]
    lines += ["", "| target | value | wanted | met |", "|---|---|---|---|"]
    for ratio in run.targets:
        met = "" if ratio.met is None else ("met" if ratio.met else "**not met**")
        lines.append(
            f"| {ratio.name} | {_num(ratio.value, 4 if 'cosine' in ratio.name else 2)} | {ratio.target} | {met} |"
        )
    return "\n".join(lines)


def print_targets(run: DeviceRun) -> None:
    print("\n== targets ==")
    for ratio in run.targets:
        verdict = "" if ratio.met is None else ("  [met]" if ratio.met else "  [NOT MET]")
        value = _num(ratio.value, 6 if "cosine" in ratio.name else 2)
        target = f"  target {ratio.target}" if ratio.target else ""
        print(f"{ratio.name:72s} {value:>10s}{target}{verdict}")


def write_json(run: DeviceRun, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run.to_json(), indent=2, default=str) + "\n")
