"""bench.scaleout in its smallest form (1 then 2 real workers behind a real gateway and nats-server,
2 s a cell) gives a consistent table; its pure parts (the limit, pinning, py-spy's stacks) alone.
Nothing here checks a timing: only that the numbers agree with each other and with what was sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import scaleout, stacks
from bench.scaleout import Cell, Load, limit_of, place

RAW = """\
<module> (<string>:1);run (uvicorn/main.py:632);Runner.run (asyncio/runners.py:118);\
Dispatcher.run (sie/gateway/dispatch.py:208);MetricWrapperBase.labels (prometheus_client/metrics.py:180) 6
<module> (<string>:1);run (uvicorn/main.py:632);Runner.run (asyncio/runners.py:118);\
Dispatcher._publish (sie/gateway/dispatch.py:239);TcpTransport.writelines (nats/aio/transport.py:162);\
StreamWriter.writelines (asyncio/streams.py:346) 3
<module> (<string>:1);run (uvicorn/main.py:632);Runner.run (asyncio/runners.py:118);\
f (/opt/py/lib/python3.11/site-packages/msgpack/fallback.py:10);f (/opt/py/lib/python3.11/site-packages/msgpack/fallback.py:12) 1
garbage line without a count
"""


def test_stacks_rank_self_and_inclusive_samples() -> None:
    summary = stacks.summarize(stacks.parse(RAW))
    assert summary.samples == 10
    assert summary.self_by_package == [("prometheus_client", 6), ("asyncio", 3), ("msgpack", 1)]
    assert summary.self_by_function[0] == ("MetricWrapperBase.labels (prometheus_client)", 6)
    inclusive = dict(summary.inclusive_by_function)
    # Frames in every sample (the CLI, uvicorn's run, the loop) say nothing and are left out;
    # a recursive function counts once per stack.
    assert "Runner.run (asyncio)" not in inclusive
    assert inclusive["Dispatcher.run (sie.gateway)"] == 6
    assert inclusive["f (msgpack)"] == 1
    lines = summary.lines()
    assert lines[0] == "10 samples (shares of all)"
    assert "| prometheus_client | 60% |" in lines


def _cell(cores: int, gateway: float, workers: list[float], other: float = 0.0) -> Cell:
    return Cell(
        workers=len(workers),
        load=Load(1, 64),
        requests=1000,
        failed=0,
        items=1000,
        elapsed_s=10.0,
        window_s=10.0,
        p50_ms=1.0,
        p99_ms=2.0,
        cores=cores,
        gateway_cpu_s=gateway,
        nats_cpu_s=1.0,
        worker_cpu_s=workers,
        worker_items=[1000 // len(workers)] * len(workers),
        loadgen_cpu_s=1.0,
        loadgen_processes=1,
        other_cpu_s=other,
    )


def test_limit_names_the_saturated_part() -> None:
    # 2 cores, 1.95 busy: the machine, whatever each process holds; the biggest share is named.
    machine = limit_of(_cell(2, gateway=9.0, workers=[5.0], other=3.5))
    assert machine.what == "cores"
    assert "most: gateway" in machine.detail
    assert "0.35 by other work" in machine.detail
    assert limit_of(_cell(16, gateway=9.5, workers=[3.0, 3.0])).what == "gateway"
    assert limit_of(_cell(16, gateway=2.0, workers=[9.0, 3.0])).what == "worker"
    assert limit_of(_cell(16, gateway=2.0, workers=[2.0, 2.0])).what == "none"


def test_pinning_gives_each_process_its_own_cores() -> None:
    got = place(list(range(16)), workers=4, loadgen_processes=2)
    assert (got.gateway, got.nats, got.loadgen) == ([0], [1], [2, 3])
    assert got.workers == [[4], [5], [6], [7]]
    with pytest.raises(ValueError, match="needs 8 cores"):
        place([0, 1], workers=4, loadgen_processes=2)


def test_scale_out_one_then_two_workers(tmp_path: Path) -> None:
    args = scaleout.build_parser().parse_args(
        [
            *("--scale-out", "2,1", "--seconds", "2", "--processes", "1", "--log-dir", str(tmp_path)),
            *("--batched-concurrency", "4", "--single-concurrency", "8"),
        ]
    )
    run = scaleout.run(args, say=lambda _: None)
    assert [step.workers for step in run.steps] == [1, 2]  # sorted, each started once
    for step in run.steps:
        assert step.min_cosine >= scaleout.MIN_COSINE  # the vectors through the gateway are the model's
        assert [cell.load.batch for cell in step.cells] == [32, 1]
        for cell in step.cells:
            assert cell.failed == 0, cell.error_sample
            assert cell.workers == step.workers
            assert cell.items == cell.requests * cell.load.batch > 0
            # Every item answered was run by exactly one worker: the workers' own counters add up.
            assert sum(cell.worker_items) == cell.items
            assert len(cell.worker_cpu_s) == step.workers
            assert min(cell.worker_cpu_s) > 0 and cell.gateway_cpu_s > 0 and cell.nats_cpu_s > 0
            assert cell.loadgen_cpu_s > 0 and cell.window_s >= cell.elapsed_s > 0
    both = run.cell(2, Load(32, 4))
    assert min(both.worker_items) > 0  # the stream spread 32-item requests' items over both workers
    for load in run.loads:
        first, second = run.cell(1, load), run.cell(2, load)
        assert run.ratio(first) == 1.0 and run.efficiency(first) == 1.0
        assert run.efficiency(second) == pytest.approx(second.items_per_s / (2 * first.items_per_s))
    lines = scaleout.report(run)
    rows = [line for line in lines if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 4 and all(row.count("|") == 13 for row in rows)
    single = run.cell(1, Load(1, 8))
    gateway_cap = 1e6 / single.us_per_item(single.gateway_cpu_s)
    assert f"one gateway core caps at {gateway_cap:.0f} items/s" in "\n".join(lines)
    data = run.to_json()
    assert data["steps"][1]["cells"][0]["efficiency"] == pytest.approx(run.efficiency(both))
    assert data["steps"][0]["cells"][1]["limit"]["what"] in {
        "cores",
        "gateway",
        "worker",
        "load generator",
        "none",
    }
