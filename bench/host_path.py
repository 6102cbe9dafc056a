"""The host path per item: what our server spends around a model that costs next to nothing.

Why a near-free model: on a GPU the forward of a small encoder takes microseconds per item, so what
limits throughput is the CPU work around it (HTTP, decoding, tokenizing, batching, encoding the
answer). A 1-layer, 32-wide random BERT with the MiniLM tokenizer (``random_models.TINY``) makes that
work measurable on any CPU. The *floor* is what the work cannot go below: the Rust tokenizer's batch
encode, the tiny forward and mean pooling in this process on one thread, measured in the same run.

What is read: the server's CPU seconds from /proc (the load generator, a separate process, is not
counted), items answered and round trips. Cells: 32-item requests of corpus texts at a few
connections (CPU per item, items/s) and lone 1-item queries one at a time (CPU per request, round
trip), on ``/v1/encode`` (msgpack and JSON) and ``/v1/embeddings``, with the server pinned to one
core and then to every core (``taskset``); with ``--gateway``, the same through a gateway and a queue
worker (bench/cluster.py) for the gateway's and the worker's CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench import corpus, procs, random_models, servers
from bench.loadgen import JSON, MSGPACK, run_load

BATCH: Final = 32
_ROOT: Final = Path(__file__).resolve().parent.parent  # the checkout: bench.lean_server's import root
# 32-item requests in flight per core the server may use: enough to keep every stage busy. Four in
# all saturated one core but not two (on a 2-core AMX Xeon, 4 -> 8 connections: 1 core 2978 -> 2907
# items/s, 2 cores 5113 -> 5709), so the cores-over-one-core ratio measured a latency, not capacity.
CONNECTIONS_PER_CORE: Final = 4


@dataclass(frozen=True)
class Bodies:
    """Request ``i`` carries ``per_request`` texts from ``texts`` starting at ``i * per_request``, as
    msgpack or JSON for ``/v1/encode`` or JSON for ``/v1/embeddings`` (``openai``)."""

    texts: tuple[str, ...]
    per_request: int
    wire: str  # "msgpack", "json" or "openai"
    model: str = ""

    @property
    def content_type(self) -> str:
        return MSGPACK if self.wire == "msgpack" else JSON

    @property
    def accept(self) -> str:
        return self.content_type

    def __call__(self, request: int) -> bytes:
        start = request * self.per_request
        batch = [self.texts[(start + j) % len(self.texts)] for j in range(self.per_request)]
        if self.wire == "openai":
            return json.dumps({"model": self.model, "input": batch}).encode()
        body = {"items": [{"text": text} for text in batch]}
        if self.wire == "json":
            return json.dumps(body).encode()
        import msgpack

        return bytes(msgpack.packb(body, use_bin_type=True))


def route_of(wire: str, model: str) -> str:
    return "/v1/embeddings" if wire == "openai" else f"/v1/encode/{model}"


# --- the floor ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Floor:
    """CPU seconds on one thread, in this process, of what a request cannot avoid: per item of 32-item
    batches of corpus texts (``batch_item_s``) and per lone query (``lone_s``), the cheaper of two
    pipelines: the Rust tokenizer's batch encode, our packed forward and pooling (the adapter the server
    runs, without the server around it), or the tokenizer, transformers' padded forward and mean pooling.
    ``tokenize_*`` is the tokenizer's share alone."""

    batch_item_s: float
    lone_s: float
    tokenize_item_s: float
    tokenize_lone_s: float
    packed_item_s: float
    packed_lone_s: float
    padded_item_s: float
    padded_lone_s: float


def _cpu_per_call(call: Callable[[Any], Any], inputs: Sequence[Any], rounds: int) -> float:
    """The least CPU seconds per input over ``rounds`` passes (the first call warms up)."""
    call(inputs[0])
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for one in inputs:
            call(one)
        best = min(best, (time.process_time() - started) / len(inputs))
    return best


def floor_meter(folder: Path, texts: Sequence[str], queries: Sequence[str]) -> Callable[[int], Floor]:
    """Loads the pipelines once; each call measures the floor (``rounds`` passes, the least CPU).
    The run measures it before every round of cells, so it sees the machine the cells saw (this VM's
    speed moved 1.7x between runs an hour apart, the pure Rust tokenizer included)."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    from bench.lean_server import load
    from bench.packed_ab import FORWARD, GROUP

    encoder, runner = load(folder)  # one thread
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(corpus.MAX_TOKENS)
    model = AutoModel.from_pretrained(str(folder)).eval()

    def padded(batch: list[str]) -> Any:
        encodings = tokenizer.encode_batch_fast(batch)
        longest = max(len(e.ids) for e in encodings)
        ids = torch.tensor([[*e.ids, *[0] * (longest - len(e.ids))] for e in encodings])
        mask = (ids != 0).long()
        with torch.inference_mode():
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
            summed = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
            return torch.nn.functional.normalize(summed, dim=-1).numpy()

    def packed(batch: list[str]) -> Any:
        prepared = sorted(encoder.prepare(batch, FORWARD), key=lambda item: item.cost)
        return runner.run(prepared, [GROUP] * len(prepared))

    batches = [list(texts[i * BATCH : (i + 1) * BATCH]) for i in range(len(texts) // BATCH)]
    lone = [[query] for query in queries]
    pipelines = (("tokenize", tokenizer.encode_batch_fast), ("packed", packed), ("padded", padded))

    def measure(rounds: int = 3) -> Floor:
        torch.set_num_threads(1)
        # one core, the last: a 1-core server is on the first
        with procs.pinned({max(os.sched_getaffinity(0))}):
            return _floor_of(
                {name: _cpu_per_call(call, batches, rounds) / BATCH for name, call in pipelines},
                {name: _cpu_per_call(call, lone, rounds) for name, call in pipelines},
            )

    return measure


def _floor_of(per_item: dict[str, float], per_lone: dict[str, float]) -> Floor:
    return Floor(
        min(per_item["packed"], per_item["padded"]),
        min(per_lone["packed"], per_lone["padded"]),
        per_item["tokenize"],
        per_lone["tokenize"],
        per_item["packed"],
        per_lone["packed"],
        per_item["padded"],
        per_lone["padded"],
    )


def median_floor(floors: Sequence[Floor]) -> Floor:
    """Each number the median of ``floors``' (the floor of every round)."""
    fields = [f.name for f in dataclasses.fields(Floor)]
    return Floor(*(statistics.median(getattr(one, name) for one in floors) for name in fields))


# --- cells ----------------------------------------------------------------------------------------


@dataclass
class Cell:
    """One load shape against one server setting: ``per_request`` items per request over
    ``connections`` keep-alive connections; the server's CPU per item and per request, items/s and
    the round trip's median and 90th percentile."""

    target: str  # "server 1 core", "server 2 cores", "gateway"
    wire: str
    per_request: int
    connections: int
    requests: int
    items_per_s: float = 0.0
    cpu_per_item_s: float = 0.0
    cpu_per_request_s: float = 0.0
    p50_s: float = 0.0
    p90_s: float = 0.0
    cpu_by_process: dict[str, float] = field(default_factory=dict)  # seconds per request, per process
    failed: int = 0


def run_cell(
    base_url: str,
    pids: dict[str, int],
    cell: Cell,
    texts: Sequence[str],
    model: str,
    generator_cpus: set[int] | None,
) -> Cell:
    bodies = Bodies(tuple(texts), cell.per_request, cell.wire, model)
    before: dict[str, float] = {}

    def on_release() -> None:
        before.update({name: procs.cpu_seconds(pid) for name, pid in pids.items()})

    with procs.pinned(generator_cpus):
        report = run_load(
            base_url,
            route_of(cell.wire, model),
            bodies,
            cell.connections,
            min(cell.connections, 2),
            cell.requests,
            on_release=on_release,
        )
    spent = {name: procs.cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    answered = len(report.answered)
    cell.failed = report.failed
    if answered == 0:
        raise RuntimeError(f"no request answered in {cell}: {report.error_sample}")
    items = answered * cell.per_request
    total = sum(spent.values())
    cell.items_per_s = items / report.elapsed_s
    cell.cpu_per_item_s = total / items
    cell.cpu_per_request_s = total / answered
    cell.cpu_by_process = {name: seconds / answered for name, seconds in spent.items()}
    latencies = sorted(report.latencies_s)
    cell.p50_s = statistics.median(latencies)
    cell.p90_s = latencies[int(0.9 * (len(latencies) - 1))]
    return cell


# --- the run --------------------------------------------------------------------------------------


@dataclass
class HostPathRun:
    floor: Floor  # the median of every round's
    cells: list[Cell]
    cpus: int
    floors_measured: int = 1
    notes: list[str] = field(default_factory=list)


def _cells(
    target: str, wires: Sequence[str], batch_requests: int, lone_requests: int, cores: int
) -> list[Cell]:
    """Per wire: 32-item requests on ``CONNECTIONS_PER_CORE`` connections per core, and lone ones."""
    cells = []
    for wire in wires:
        cells.append(Cell(target, wire, BATCH, CONNECTIONS_PER_CORE * cores, batch_requests))
        cells.append(Cell(target, wire, 1, 1, lone_requests))
    return cells


def _server_cells(
    built: random_models.BuiltModel,
    texts: Sequence[str],
    queries: Sequence[str],
    cpus: list[int],
    args: argparse.Namespace,
    log_dir: Path,
    floors: tuple[Callable[[int], Floor], list[Floor]],
) -> list[Cell]:
    """Our server pinned to ``cpus``, and with ``--before`` a second one from that source tree (an
    earlier commit) pinned beside it; the load generator on the other cores when there are any. Each
    round runs every cell on each server in turn, so both see the same machine; a cell's numbers are
    the medians of its rounds (this VM swings 10-20 % between identical runs)."""
    rest = set(os.sched_getaffinity(0)) - set(cpus)
    env = {"SIE_DEFAULT_COMPUTE_PRECISION": "float32", **dict(args.server_env)}
    cores = f"{len(cpus)} core{'s' if len(cpus) > 1 else ''}"
    sources: list[Path | None] = [args.before, None] if args.before else [None]
    started: list[tuple[str, servers.Server]] = []
    try:
        for source in sources:
            server = servers.start_sie(
                built.model_id,
                "float32",
                env,
                log_dir,
                source / "src" if source is not None else None,
                models_dir=built.yaml_path.parent,
                log_name=f"sie-server-{len(cpus)}cpu{'-before' if source else ''}.log",
                cpus=cpus,
            )
            started.append((f"{'before: ' if source else ''}server {cores}", server))
        if args.lean:
            started.append((f"lean ASGI {cores}", start_lean(built, cpus, log_dir)))
        rounds: dict[tuple[str, str, int], list[Cell]] = {}
        meter, measured = floors
        for _ in range(args.rounds):
            measured.append(meter(3))
            for spec in _cells("", args.wires, args.batch_requests, args.lone_requests, len(cpus)):
                pool = texts if spec.per_request > 1 else queries
                for target, server in started:
                    if target.startswith("lean") and spec.wire != "msgpack":
                        continue  # the yardstick speaks msgpack only
                    cell = Cell(target, spec.wire, spec.per_request, spec.connections, spec.requests)
                    run_cell(
                        server.base_url, {"server": server.pid}, cell, pool, built.model_id, rest or None
                    )
                    _print_cell(cell)
                    rounds.setdefault((target, spec.wire, spec.per_request), []).append(cell)
    finally:
        for _, server in started:
            server.stop()
    return [median_cell(cells) for cells in rounds.values()]


def start_lean(built: random_models.BuiltModel, cpus: list[int], log_dir: Path) -> servers.Server:
    """``bench.lean_server`` pinned like ours: the yardstick of what a Python front end costs."""
    port = procs.free_port()
    argv = ["taskset", "-c", ",".join(map(str, cpus)), sys.executable, "-m", "bench.lean_server"]
    argv += [str(built.folder), str(port)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    process = procs.ManagedProcess("lean-server", argv, env, log_dir / f"lean-server-{len(cpus)}cpu.log")
    server = servers.Server("lean", process, f"http://127.0.0.1:{port}", built.model_id, "")
    process.start()
    return servers.ready(server, 120.0, f"/v1/models/{built.model_id}")


def median_cell(cells: Sequence[Cell]) -> Cell:
    """One cell whose every measured number is the median of ``cells``' (the same cell's rounds)."""
    first = cells[0]

    def med(name: str) -> float:
        return float(statistics.median(getattr(c, name) for c in cells))

    by_process = {
        name: statistics.median(c.cpu_by_process[name] for c in cells) for name in first.cpu_by_process
    }
    return Cell(
        first.target,
        first.wire,
        first.per_request,
        first.connections,
        first.requests,
        items_per_s=med("items_per_s"),
        cpu_per_item_s=med("cpu_per_item_s"),
        cpu_per_request_s=med("cpu_per_request_s"),
        p50_s=med("p50_s"),
        p90_s=med("p90_s"),
        cpu_by_process=by_process,
        failed=sum(c.failed for c in cells),
    )


def _print_cell(cell: Cell) -> None:
    by = ", ".join(f"{n} {s * 1e6:.0f}" for n, s in cell.cpu_by_process.items())
    print(
        f"  {cell.target:15} {cell.wire:8} {cell.per_request:2} x c{cell.connections}: "
        f"{cell.items_per_s:8.0f} items/s, CPU {cell.cpu_per_item_s * 1e6:6.0f} us/item "
        f"{cell.cpu_per_request_s * 1e6:6.0f} us/request ({by}), "
        f"round trip p50 {cell.p50_s * 1e3:.2f} ms p90 {cell.p90_s * 1e3:.2f} ms"
        + (f", {cell.failed} failed" if cell.failed else ""),
        flush=True,
    )


def run(args: argparse.Namespace) -> HostPathRun:
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="sie-host-path-"))
    tokenizer_folder = corpus.default_model_folder()
    built = random_models.build([random_models.TINY], tokenizer_folder, log_dir / "models")[0]
    texts = corpus.build_corpus(tokenizer_folder, size=512).texts
    queries = corpus.build_corpus(tokenizer_folder, queries=64, size=64).queries
    meter = floor_meter(built.folder, texts, queries)
    measured = [meter(3)]
    print(_floor_line(measured[0]), flush=True)
    all_cpus = sorted(os.sched_getaffinity(0))
    cells: list[Cell] = []
    settings = [all_cpus[:1], all_cpus] if len(all_cpus) > 1 else [all_cpus]
    for cpus in settings:
        if args.cores and len(cpus) not in args.cores:
            continue
        cells += _server_cells(built, texts, queries, cpus, args, log_dir, (meter, measured))
    if args.gateway:
        from bench import host_path_cluster

        cells += host_path_cluster.gateway_cells(built, texts, queries, args, log_dir)
    return HostPathRun(median_floor(measured), cells, len(all_cpus), floors_measured=len(measured))


def _floor_line(floor: Floor) -> str:
    us = 1e6
    return (
        f"Floor (in process, one thread): {floor.batch_item_s * us:.0f} us/item in 32-item batches, "
        f"{floor.lone_s * us:.0f} us per lone query (tokenizer alone {floor.tokenize_item_s * us:.0f} / "
        f"{floor.tokenize_lone_s * us:.0f}; with our packed forward {floor.packed_item_s * us:.0f} / "
        f"{floor.packed_lone_s * us:.0f}; with transformers' padded forward {floor.padded_item_s * us:.0f} / "
        f"{floor.padded_lone_s * us:.0f})."
    )


def summary_markdown(result: HostPathRun) -> str:
    floor = result.floor
    lines = [
        _floor_line(floor) + f" Median of {result.floors_measured} measurements, one before each round.",
        "",
        "| target | wire | items x connections | items/s | CPU us/item | x floor | CPU us/request "
        "| above floor | p50 ms | p90 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result.cells:
        floor_s = floor.batch_item_s if c.per_request > 1 else floor.lone_s
        above = c.cpu_per_request_s - floor_s * c.per_request
        lines.append(
            f"| {c.target} | {c.wire} | {c.per_request} x {c.connections} | {c.items_per_s:.0f} | "
            f"{c.cpu_per_item_s * 1e6:.0f} | {c.cpu_per_item_s / floor_s:.2f} | "
            f"{c.cpu_per_request_s * 1e6:.0f} | {above * 1e6:.0f} | {c.p50_s * 1e3:.2f} | {c.p90_s * 1e3:.2f} |"
        )
    scaling = _scaling(result.cells)
    if scaling:
        lines += ["", scaling]
    return "\n".join(lines)


def _scaling(cells: Sequence[Cell]) -> str:
    """Items/s on every core over items/s on one, per wire, at 32-item requests."""
    one = {c.wire: c.items_per_s for c in cells if c.target == "server 1 core" and c.per_request > 1}
    many = {
        c.wire: c
        for c in cells
        if c.target.startswith("server") and c.target.endswith("cores") and c.per_request > 1
    }
    parts = [f"{w} {many[w].items_per_s / one[w]:.2f}x" for w in one if w in many]
    return f"Every core over one core (32-item requests): {', '.join(parts)}." if parts else ""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wires", type=lambda s: s.split(","), default=["msgpack", "json", "openai"])
    p.add_argument("--batch-requests", type=int, default=150, help="32-item requests per cell")
    p.add_argument("--lone-requests", type=int, default=400, help="1-item requests per cell")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every cell; medians are reported")
    p.add_argument("--cores", type=lambda s: [int(x) for x in s.split(",")], default=None)
    p.add_argument("--gateway", action="store_true", help="also through a gateway and a queue worker")
    p.add_argument(
        "--lean",
        action="store_true",
        help="also the leanest Python server of the same forward (bench/lean_server.py), msgpack only",
    )
    p.add_argument("--server-env", type=lambda s: tuple(s.split("=", 1)), action="append", default=[])
    p.add_argument(
        "--before",
        type=Path,
        default=None,
        metavar="TREE",
        help="also run the server from this source tree (a checkout of an earlier commit), before ours",
    )
    p.add_argument("--log-dir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)


def main(argv: list[str] | None = None, write: Callable[[str], Any] = print) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench --host-path", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        result = run(args)
    finally:
        procs.stop_all()
    write("\n== summary (markdown) ==\n")
    write(summary_markdown(result))
    if args.json:
        args.json.write_text(json.dumps(dataclasses.asdict(result), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
