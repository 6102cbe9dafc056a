"""``python -m bench.scaleout --scale-out 1,2,4`` (``scripts/bench-cluster --scale-out 1,2,4``): how
the queue cluster's throughput grows with its workers, and which process stops it.

One ``nats-server`` (JetStream), one ``sie-gateway`` and N queue workers (``sie-server serve`` with
``SIE_NATS_URL``, one forward thread each) serve a seeded random-weight encoder of 1 layer, 32 wide,
with the all-MiniLM tokenizer (bench/random_models.py): its forward costs a few microseconds an item,
so what is measured is the gateway, NATS and the workers' request path, not the model. Workers are
added between steps (1, then 2, then 4 ...) behind the same gateway and NATS.

At each step the vectors through the gateway are checked first against sentence-transformers running
the same weights in this process (float32, cosine >= 0.9999), then two cells run for ``--seconds``
each through the multi-process HTTP/1.1 generator (bench/loadgen.py, msgpack): 32-item requests and
1-item requests, each at a concurrency that keeps every worker fed. A short untimed calibration cell
before each sizes the request count, so a cell ends on its time limit, not on a count guessed for
another worker count. While a cell runs, the CPU time (user + system, /proc) of the gateway, NATS,
each worker, the load generator and the rest of the machine is read, so the table gives each
process's CPU per item and names the limit: the machine's cores when they are all busy, else the
process that holds about one whole core (the gateway's or a worker's event loop), else nothing
(the load was latency-bound). ``--profile S`` then samples the gateway with py-spy (bench/stacks.py)
under each cell's load at the largest N. ``--pin`` gives the gateway, NATS, the load generator and
each worker cores of their own, on a machine that has 3 + processes + N of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import numpy as np
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench import corpus, procs, servers, stacks
from bench.clients import SdkSender
from bench.cluster import serves, start_gateway, start_nats
from bench.loadgen import TextBodies, Wire, run_load
from bench.random_models import Shape, build
from bench.raw import RawModel
from bench.stats import percentiles_ms

TINY: Final = Shape("tiny", hidden=32, layers=1, heads=2, intermediate=64, max_seq=128)
MIN_COSINE: Final = 0.9999  # float32 on both sides: only summation order differs
SATURATED: Final = 0.85  # a process at this share of a core (the machine: of its cores) is the limit
SHARED: Final = 0.25  # cores used by other work past which a cell's rate is not the cluster's own
CALIBRATION_S: Final = 1.5
CHECK_TEXTS: Final = 32


@dataclass(frozen=True)
class Load:
    batch: int  # items per request
    concurrency: int  # requests in flight

    @property
    def key(self) -> str:
        return f"b={self.batch} c={self.concurrency}"


@dataclass
class Cell:
    """One load at one worker count: what was answered, and each process's CPU meanwhile."""

    workers: int
    load: Load
    requests: int  # answered
    failed: int
    items: int
    elapsed_s: float  # release to the last answer
    window_s: float  # the span the CPU times were read over (elapsed plus the drain)
    p50_ms: float
    p99_ms: float
    cores: int  # cores this run may use
    gateway_cpu_s: float
    nats_cpu_s: float
    worker_cpu_s: list[float]
    worker_items: list[int]  # items each worker ran through the model (its sie_batch_size_sum)
    loadgen_cpu_s: float
    loadgen_processes: int
    other_cpu_s: float  # the rest of the machine (other work on it, this harness)
    error_sample: str = ""

    @property
    def items_per_s(self) -> float:
        return self.items / self.elapsed_s

    def us_per_item(self, cpu_s: float) -> float:
        return 1e6 * cpu_s / max(self.items, 1)

    def busy(self, cpu_s: float) -> float:
        """Cores ``cpu_s`` kept busy on average over the window."""
        return cpu_s / self.window_s

    @property
    def ours_cpu_s(self) -> float:
        return self.gateway_cpu_s + self.nats_cpu_s + sum(self.worker_cpu_s) + self.loadgen_cpu_s


@dataclass(frozen=True)
class Limit:
    what: str  # "cores", "gateway", "worker", "load generator", "none"
    detail: str
    next_step: str


def limit_of(cell: Cell) -> Limit:
    """What held the cell's throughput: the whole machine when its cores were busy, else the one
    process that ran a core flat (an event loop: the gateway's, a worker's, the generator's), else
    nothing: requests were waiting on each other, not on a CPU."""
    busy = cell.busy(cell.ours_cpu_s + cell.other_cpu_s)
    per_item = {
        "gateway": cell.gateway_cpu_s,
        "NATS": cell.nats_cpu_s,
        "workers": sum(cell.worker_cpu_s),
        "load generator": cell.loadgen_cpu_s,
    }
    if busy >= SATURATED * cell.cores:
        top = max(per_item, key=lambda k: per_item[k])
        shares = ", ".join(f"{k} {100 * v / cell.ours_cpu_s:.0f}%" for k, v in per_item.items())
        return Limit(
            "cores",
            f"all {cell.cores} cores busy ({busy:.2f}; {cell.busy(cell.other_cpu_s):.2f} by other work); "
            f"CPU per item: {shares}; most: {top}",
            "more cores, one per process (--pin), or less CPU per item in the largest share",
        )
    if cell.busy(cell.gateway_cpu_s) >= SATURATED:
        return Limit(
            "gateway",
            f"the gateway's event loop ({cell.busy(cell.gateway_cpu_s):.2f} cores)",
            "a second gateway on the same NATS (gateways share nothing), or less gateway CPU per item",
        )
    worker = max(cell.worker_cpu_s, default=0.0)
    if cell.busy(worker) >= SATURATED:
        return Limit("worker", f"a worker ({cell.busy(worker):.2f} cores)", "more workers")
    if cell.busy(cell.loadgen_cpu_s) >= SATURATED * cell.loadgen_processes:
        return Limit(
            "load generator",
            f"the load generator ({cell.busy(cell.loadgen_cpu_s):.2f} cores in {cell.loadgen_processes})",
            "more generator processes (--processes)",
        )
    return Limit(
        "none",
        f"no process saturated ({busy:.2f} of {cell.cores} cores busy): latency-bound",
        "more requests in flight",
    )


@dataclass
class Step:
    workers: int
    min_cosine: float
    cells: list[Cell] = field(default_factory=list)


@dataclass
class Run:
    model: str
    cores: int
    loads: list[Load]
    steps: list[Step] = field(default_factory=list)
    profiles: dict[str, list[str]] = field(default_factory=dict)  # load key -> summary lines
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)  # at the start
    load_average_end: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def cell(self, workers: int, load: Load) -> Cell:
        step = next(s for s in self.steps if s.workers == workers)
        return next(c for c in step.cells if c.load == load)

    def ratio(self, cell: Cell) -> float:
        """Items/s over the first step's (which need not be one worker)."""
        return cell.items_per_s / self.cell(self.steps[0].workers, cell.load).items_per_s

    def efficiency(self, cell: Cell) -> float:
        """Items/s over what the first step's would be per worker, times this step's workers:
        1.0 is linear scale-out."""
        first = self.cell(self.steps[0].workers, cell.load)
        return cell.items_per_s / (cell.workers * first.items_per_s / first.workers)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for step_data, step in zip(data["steps"], self.steps, strict=True):
            for cell_data, cell in zip(step_data["cells"], step.cells, strict=True):
                cell_data.update(
                    items_per_s=cell.items_per_s,
                    ratio=self.ratio(cell),
                    efficiency=self.efficiency(cell),
                    limit=asdict(limit_of(cell)),
                )
        return data


# --- the processes --------------------------------------------------------------------------------


class Cluster:
    """nats-server, the gateway and the workers; workers only ever get added."""

    def __init__(self, built_model: str, models_dir: Path, log_dir: Path, worker_env: dict[str, str]) -> None:
        self.model, self.models_dir, self.log_dir = built_model, models_dir, log_dir
        self.worker_env = worker_env
        self.nats, self.nats_url = start_nats(log_dir)
        self.workers: list[servers.Server] = []
        self.gateway: procs.ManagedProcess | None = None
        self.url = ""

    def _start_worker(self, index: int) -> servers.Server:
        env = {
            "SIE_NATS_URL": self.nats_url,
            "SIE_WORKER_ID": f"scale-{index}",
            "SIE_WORKER_METRICS_PORT": "0",
            "SIE_HEALTH_PUBLISH_INTERVAL_MS": "1000",
            "SIE_INTRA_OP_THREADS": "1",
            **self.worker_env,
        }
        return servers.start_sie(
            self.model,
            "float32",
            env,
            self.log_dir,
            device="cpu",
            models_dir=self.models_dir,
            log_name=f"worker-{index}.log",
        )

    def grow(self, count: int) -> None:
        """Starts workers until there are ``count`` (side by side: each spends its start importing
        torch), then waits until the gateway sees them all."""
        missing = range(len(self.workers), count)
        if missing:
            with ThreadPoolExecutor(len(missing)) as pool:
                self.workers += list(pool.map(self._start_worker, missing))
        ready = serves(self.model, count)
        if self.gateway is None:
            env = {"SIE_MODELS_DIR": str(self.models_dir)}
            self.gateway, self.url = start_gateway(self.nats_url, self.log_dir, ready, env)
            return
        gateway = self.gateway
        procs.wait_ready(gateway, lambda client: ready(client.get(f"{self.url}/health").json()), 60)

    @property
    def gateway_pid(self) -> int:
        assert self.gateway is not None
        return self.gateway.pid

    def items_run(self) -> list[int]:
        """Items each worker has run through the model so far (``sie_batch_size_sum`` on its
        ``/metrics``), so a cell tells how the stream spread its items."""
        counts = []
        with httpx.Client(timeout=10.0) as client:
            for worker in self.workers:
                text = client.get(f"{worker.base_url}/metrics").text
                counts.append(
                    round(
                        sum(
                            sample.value
                            for family in text_string_to_metric_families(text)
                            for sample in family.samples
                            if sample.name == "sie_batch_size_sum"
                            and sample.labels.get("model") == self.model
                        )
                    )
                )
        return counts

    def cpu(self) -> tuple[float, float, list[float]]:
        """CPU seconds so far of the gateway, NATS and each worker."""
        return (
            procs.cpu_seconds(self.gateway_pid),
            procs.cpu_seconds(self.nats.pid),
            [procs.cpu_seconds(w.pid) for w in self.workers],
        )

    def stop(self) -> None:
        for process in [*(w.process for w in reversed(self.workers)), self.gateway, self.nats]:
            if process is not None:
                process.stop()


@dataclass(frozen=True)
class Placement:
    """Cores of their own (``--pin``): the gateway one, NATS one, the generator one per process,
    each worker one."""

    gateway: list[int]
    nats: list[int]
    loadgen: list[int]
    workers: list[list[int]]


def place(cores: list[int], workers: int, loadgen_processes: int) -> Placement:
    need = 2 + loadgen_processes + workers
    if len(cores) < need:
        raise ValueError(
            f"--pin needs {need} cores (gateway, NATS, {loadgen_processes} generator, {workers} workers); "
            f"this process may use {len(cores)}"
        )
    rest = cores[2 + loadgen_processes :]
    return Placement(
        [cores[0]], [cores[1]], cores[2 : 2 + loadgen_processes], [[rest[i]] for i in range(workers)]
    )


def pin(pid: int, cores: list[int]) -> None:
    """Every thread of the process tree onto ``cores``; threads it starts later inherit them."""
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        for thread in proc.threads():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(thread.id, cores)


# --- measuring ------------------------------------------------------------------------------------


async def _vectors(url: str, model: str, texts: list[str]) -> np.ndarray:
    sender = SdkSender(url, model, 4)
    try:
        return await sender.vectors(texts)
    finally:
        await sender.aclose()


def check_vectors(cluster: Cluster, sample: list[str], reference: np.ndarray) -> float:
    """Min cosine of the gateway's vectors (requests of 1 and of 8, so several workers answer) to
    the reference's."""
    alone = np.concatenate([asyncio.run(_vectors(cluster.url, cluster.model, [t])) for t in sample[:8]])
    groups = [
        asyncio.run(_vectors(cluster.url, cluster.model, sample[i : i + 8])) for i in range(0, len(sample), 8)
    ]
    got = np.concatenate([alone, *groups])
    want = np.concatenate([reference[:8], reference])
    cos = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    return float(cos.min())


def measure(
    cluster: Cluster, load: Load, texts: list[str], requests: int, seconds: float, processes: int
) -> Cell:
    bodies = TextBodies(tuple(texts), load.batch, Wire.MSGPACK)
    before: list[Any] = []

    def released() -> None:  # after the warm-up: its CPU is not the cell's
        before.append(cluster.items_run())
        before.extend(
            (time.monotonic(), cluster.cpu(), procs.machine_busy_seconds(), procs.own_cpu_seconds())
        )

    report = run_load(
        cluster.url,
        f"/v1/encode/{cluster.model}",
        bodies,
        load.concurrency,
        processes,
        requests,
        max_seconds=seconds,
        on_release=released,
    )
    items0, t0, (gateway0, nats0, workers0), busy0, own0 = before
    gateway1, nats1, workers1 = cluster.cpu()
    busy, own = procs.machine_busy_seconds() - busy0, procs.own_cpu_seconds() - own0
    window = time.monotonic() - t0
    items1 = cluster.items_run()
    worker_cpu = [b - a for a, b in zip(workers0, workers1, strict=True)]
    ours = (gateway1 - gateway0) + (nats1 - nats0) + sum(worker_cpu) + report.generator_cpu_s
    p50, _, p99, _ = percentiles_ms(report.latencies_s)
    return Cell(
        workers=len(cluster.workers),
        load=load,
        requests=len(report.answered),
        failed=report.failed,
        items=len(report.answered) * load.batch,
        elapsed_s=report.elapsed_s,
        window_s=window,
        p50_ms=p50,
        p99_ms=p99,
        cores=len(os.sched_getaffinity(0)),
        gateway_cpu_s=gateway1 - gateway0,
        nats_cpu_s=nats1 - nats0,
        worker_cpu_s=worker_cpu,
        worker_items=[b - a for a, b in zip(items0, items1, strict=True)],
        loadgen_cpu_s=report.generator_cpu_s,
        loadgen_processes=report.processes,
        other_cpu_s=max(0.0, busy - ours - own) + own,
        error_sample=report.error_sample,
    )


def timed_cell(cluster: Cluster, load: Load, texts: list[str], seconds: float, processes: int) -> Cell:
    """A calibration cell (untimed, CALIBRATION_S) sizes the real one at twice the requests its
    rate would answer in ``seconds``, so the real one ends on its time limit."""
    probe = measure(cluster, load, texts, 20 * load.concurrency, CALIBRATION_S, processes)
    rate = probe.requests / probe.elapsed_s if probe.requests else 0.0
    requests = max(2 * load.concurrency, math.ceil(2 * rate * seconds))
    return measure(cluster, load, texts, requests, seconds, processes)


# --- the report -----------------------------------------------------------------------------------


def table(run: Run, load: Load) -> list[str]:
    out = [
        f"**{load.batch}-item requests, {load.concurrency} in flight**",
        "",
        "| workers | items/s | x first | efficiency | p50 / p99 ms | gateway us/item | NATS us/item "
        "| workers us/item | generator us/item | cores busy (ours + other) | failed | limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for step in run.steps:
        cell = run.cell(step.workers, load)
        limit = limit_of(cell)
        out.append(
            f"| {cell.workers} | {cell.items_per_s:.0f} | {run.ratio(cell):.2f} | {run.efficiency(cell):.2f} "
            f"| {cell.p50_ms:.1f} / {cell.p99_ms:.1f} | {cell.us_per_item(cell.gateway_cpu_s):.0f} "
            f"| {cell.us_per_item(cell.nats_cpu_s):.0f} | {cell.us_per_item(sum(cell.worker_cpu_s)):.0f} "
            f"| {cell.us_per_item(cell.loadgen_cpu_s):.0f} "
            f"| {cell.busy(cell.ours_cpu_s):.2f} + {cell.busy(cell.other_cpu_s):.2f} | {cell.failed} "
            f"| {limit.what} |"
        )
    return out


def projection(cell: Cell) -> str:
    """Where scale-out would stop with a core for every process, from the CPU each spent per item
    in ``cell`` (the first step's: its workers were the busiest, and a worker's CPU per item grows
    as its share of the load shrinks; contention inflates every figure, so they bound the cost from
    above). One gateway runs one event loop, so it answers at most a core's worth of its CPU per
    item; a worker at one core answers the inverse of its own; the gateway feeds as many workers
    as the ratio of the two."""
    gateway, nats = cell.us_per_item(cell.gateway_cpu_s), cell.us_per_item(cell.nats_cpu_s)
    worker = cell.us_per_item(sum(cell.worker_cpu_s))
    return (
        f"with a core per process (CPU per item at {cell.workers} worker{'s' if cell.workers > 1 else ''}): "
        f"one gateway core caps at {1e6 / gateway:.0f} items/s, a worker core answers "
        f"{1e6 / worker:.0f} items/s, so one gateway feeds about {worker / gateway:.1f} workers; NATS "
        f"needs {nats / gateway:.2f} of a core per gateway core"
    )


def report(run: Run) -> list[str]:
    first = run.steps[0].workers
    out = [
        f"== scale-out: {run.model} (1 layer, 32 wide), {run.cores} cores, "
        f"load average {' '.join(f'{x:.2f}' for x in run.load_average)} at the start, "
        f"{' '.join(f'{x:.2f}' for x in run.load_average_end)} at the end ==",
        "",
        "vectors through the gateway vs sentence-transformers: "
        + ", ".join(f"{s.workers} workers {s.min_cosine:.6f}" for s in run.steps),
        "",
    ]
    for load in run.loads:
        out += [*table(run, load), ""]
        for step in run.steps:
            cell = run.cell(step.workers, load)
            limit = limit_of(cell)
            workers = " ".join(f"{cell.busy(w):.2f}" for w in cell.worker_cpu_s)
            spread = "/".join(str(n) for n in cell.worker_items)
            out.append(
                f"- {step.workers} workers: {limit.detail}; gateway {cell.busy(cell.gateway_cpu_s):.2f} cores, "
                f"NATS {cell.busy(cell.nats_cpu_s):.2f}, workers {workers} (items {spread}); "
                f"next: {limit.next_step}"
            )
        linear = [s.workers for s in run.steps if run.efficiency(run.cell(s.workers, load)) >= SATURATED]
        out += [
            "",
            f"efficiency >= {SATURATED} (against {first} worker{'s' if first > 1 else ''}) at: "
            f"{', '.join(map(str, linear)) or 'none'} workers",
            projection(run.cell(first, load)),
            "",
        ]
        shared = max(c.busy(c.other_cpu_s) for c in (run.cell(s.workers, load) for s in run.steps))
        if shared >= SHARED:
            out[-1:-1] = [
                f"the machine was shared: other work took up to {shared:.2f} cores during these cells, so "
                "their items/s and ratios are not the cluster's own (CPU per item is less disturbed)"
            ]
    for key, lines in run.profiles.items():
        out += [f"**gateway profile (py-spy), {run.steps[-1].workers} workers, {key}**", "", *lines, ""]
    return out


# --- the run --------------------------------------------------------------------------------------


def parse_counts(text: str) -> list[int]:
    counts = sorted({int(part) for part in text.split(",") if part.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"expected worker counts like 1,2,4, got {text!r}")
    return counts


def profile(
    cluster: Cluster, load: Load, texts: list[str], seconds: float, processes: int, rate: float, out: Path
) -> list[str]:
    """py-spy on the gateway for ``seconds`` while ``load`` runs a little longer (``rate``: the
    requests/s its timed cell answered, to size it); the summary's lines."""
    executable = stacks.py_spy()
    if executable is None:
        return ["(py-spy not found: `pip install py-spy` to profile the gateway)"]
    recorder = stacks.record(executable, cluster.gateway_pid, seconds, out)
    try:  # the generator's start and warm-up take the first second or two: the load runs past py-spy
        measure(cluster, load, texts, math.ceil(2 * rate * (seconds + 3)), seconds + 3, processes)
    finally:
        recorder.wait(timeout=seconds + 60)
    if not out.exists():
        return [f"(py-spy wrote nothing; its log: {out.with_suffix('.log')})"]
    return stacks.summarize(stacks.parse(out.read_text(errors="replace"))).lines()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scaleout", description=__doc__.split("\n\n")[0])
    p.add_argument("--scale-out", type=parse_counts, default=[1, 2, 4], help="worker counts (default 1,2,4)")
    p.add_argument("--seconds", type=float, default=25.0, help="timed seconds per cell")
    p.add_argument("--batched-concurrency", type=int, default=16, help="32-item requests in flight")
    p.add_argument("--single-concurrency", type=int, default=64, help="1-item requests in flight")
    p.add_argument("--processes", type=int, default=2, help="load generator processes")
    p.add_argument(
        "--pool", choices=("queries", "corpus"), default="queries", help="10-word queries or corpus texts"
    )
    p.add_argument(
        "--profile", type=float, default=0.0, metavar="S", help="py-spy the gateway S seconds per load"
    )
    p.add_argument("--pin", action="store_true", help="a core of its own for each process")
    p.add_argument(
        "--tokenizer-folder", type=Path, default=None, help="default: the packaged all-MiniLM-L6-v2"
    )
    p.add_argument("--log-dir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, help="write every number here")
    p.add_argument(
        "--worker-env", action="append", default=[], metavar="KEY=VALUE", help="more environment for workers"
    )
    return p


def run(args: argparse.Namespace, say: Any = print) -> Run:
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="sie-bench-scaleout-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = args.tokenizer_folder or corpus.default_model_folder()
    cores = sorted(os.sched_getaffinity(0))
    placement = place(cores, max(args.scale_out), args.processes) if args.pin else None
    [built] = build([TINY], tokenizer, log_dir / "model")
    loads = [Load(32, args.batched_concurrency), Load(1, args.single_concurrency)]
    result = Run(built.model_id, len(cores), loads, load_average=os.getloadavg())
    extra = dict(item.split("=", 1) for item in args.worker_env)
    cluster = Cluster(built.model_id, built.yaml_path.parent, log_dir, extra)
    try:
        with ThreadPoolExecutor(1) as pool:  # the first workers start while the reference is drawn
            first = pool.submit(cluster.grow, args.scale_out[0])
            data = corpus.build_corpus(tokenizer, size=512)
            texts = data.queries if args.pool == "queries" else data.texts
            sample = [data.texts[i] for i in data.check_sample[:CHECK_TEXTS]]
            reference = RawModel(built.folder, "float32").encode(sample, 8)
            first.result()
        for count in args.scale_out:
            cluster.grow(count)
            if placement is not None:
                pin(cluster.gateway_pid, placement.gateway)
                pin(cluster.nats.pid, placement.nats)
                for worker, own in zip(cluster.workers, placement.workers, strict=False):
                    pin(worker.pid, own)
                os.sched_setaffinity(0, placement.loadgen)  # the generator's processes inherit it
            step = Step(count, check_vectors(cluster, sample, reference))
            say(f"{count} workers: min cosine {step.min_cosine:.6f}")
            result.steps.append(step)
            if step.min_cosine < MIN_COSINE:
                raise RuntimeError(f"vectors through the gateway differ: min cosine {step.min_cosine:.6f}")
            for load in loads:
                cell = timed_cell(cluster, load, texts, args.seconds, args.processes)
                step.cells.append(cell)
                say(
                    f"  {load.key}: {cell.items_per_s:.0f} items/s, p50 {cell.p50_ms:.1f} ms, "
                    f"failed {cell.failed}, limit: {limit_of(cell).detail}"
                )
        if args.profile > 0:
            for cell in result.steps[-1].cells:
                rate = cell.requests / cell.elapsed_s
                out = log_dir / f"gateway-{cell.load.batch}.txt"
                result.profiles[cell.load.key] = profile(
                    cluster, cell.load, texts, args.profile, args.processes, rate, out
                )
        result.load_average_end = os.getloadavg()
    finally:
        if placement is not None:
            os.sched_setaffinity(0, cores)
        cluster.stop()
        procs.stop_all()
    say(f"logs in {log_dir}")
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    result = run(args)
    print("\n" + "\n".join(report(result)))
    print(f"run took {time.monotonic() - started:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
    return 1 if any(c.failed for s in result.steps for c in s.cells) else 0


if __name__ == "__main__":
    sys.exit(main())
