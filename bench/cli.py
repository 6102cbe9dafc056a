"""Flags, and the order of one run: corpus, raw limit, our server, Infinity, paired rounds, report.

Everything runs on this machine's cores, one thing at a time: the raw limit runs before any server
starts; each server runs its cells while the ones started before it sit idle; the paired rounds
then alternate the raw limits and every server's saturated cell (bench/paired.py). Servers are
stopped on every exit path (``finally``, SIGTERM, Ctrl-C and ``atexit``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import corpus, correctness, gpu_options, infinity_env, paired, procs, raw, report, servers
from bench.clients import JsonSender, SdkSender, Sender
from bench.load import Budget, run_cell
from bench.machine import machine
from bench.machine import server_version as _server_version
from bench.results import SATURATED, SATURATED_JSON, RunResult, ServerRun, compute_ratios, same_precision
from bench.stats import CellSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SETTLE_S = 2.0  # quiet time before reading each server's RSS after the run


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _env_set(text: str) -> tuple[tuple[str, str], ...]:
    """``A=1,B=2``; a part without ``=`` continues the value before it (``MALLOC_CONF=a:1,b:2``)."""
    parts: list[str] = []
    for part in text.split(","):
        if parts and "=" not in part:
            parts[-1] += "," + part
        elif part:
            parts.append(part)
    return tuple(_key_value(part) for part in parts)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Raw sentence-transformers limit vs our server (SDK msgpack and /v1/embeddings JSON) "
        "vs Infinity (--infinity), on one seeded corpus; correctness gate; with --device, the GPU "
        "benchmark on random-weight models; first flag --host-path: the host path per item with a "
        "near-free model (scripts/bench --host-path --help); first flag --generate: generation against raw "
        "transformers generate (scripts/bench --generate --help); see docs/benchmarks.md.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="model id our server preloads and serves")
    p.add_argument(
        "--precision",
        choices=["float32", "bfloat16"],
        default="bfloat16",
        help="sets SIE_DEFAULT_COMPUTE_PRECISION; the server decides what it means per device",
    )
    p.add_argument(
        "--server-env",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for our server (e.g. SIE_MAX_BATCH_REQUESTS=32); repeatable",
    )
    p.add_argument(
        "--server-src",
        type=Path,
        default=None,
        help="a src/ folder put first on our server's PYTHONPATH (e.g. an export of another commit)",
    )
    p.add_argument(
        "--compare-env",
        action="append",
        type=_env_set,
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="also run a second of our servers with this environment added (e.g. SIE_ALLOCATOR=system), "
        "through the same cells and paired rounds, and print ours over it; repeatable, one server each",
    )
    p.add_argument("--infinity", action="store_true", help="also benchmark Infinity (installed once)")
    p.add_argument("--infinity-dtype", default="auto", help="Infinity --dtype (default: its own default)")
    p.add_argument(
        "--infinity-batch-size",
        type=int,
        default=None,
        help="Infinity --batch-size (default: the raw float32 best batch size)",
    )
    p.add_argument("--infinity-arg", action="append", default=[], help="extra infinity_emb v2 argument")
    p.add_argument("--quick", action="store_true", help="only concurrency 1,16 and requests of 1,32 items")
    p.add_argument("--concurrency", type=_ints, default=None, help="comma list (default 1,4,16,64)")
    p.add_argument("--request-items", type=_ints, default=None, help="items per request (default 1,32)")
    p.add_argument(
        "--items",
        type=int,
        default=None,
        help="items each multi-item cell sends (single-item cells send a quarter as many requests); "
        "at least two requests per worker (default 2048; --device: 8192, see docs)",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=60.0,
        help="stop sending in a cell after this long (what was sent is still awaited and counted)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus-size", type=int, default=None, help="texts (default 2048; --device: 4096)")
    p.add_argument("--query-count", type=int, default=64, help="size of the 10-word query set")
    p.add_argument(
        "--raw-batch-sizes", type=_ints, default=None, help="default 16,32,64,128; --device: 64,128,256,512"
    )
    p.add_argument(
        "--raw-sweep-items",
        type=int,
        default=None,
        help="texts per batch-size trial (default 512; --device: 1024); the best size is then timed "
        "over the whole corpus",
    )
    p.add_argument(
        "--pairs",
        type=int,
        default=3,
        help="paired rounds at the end (raw limits and each server's saturated cell back to back); the "
        "target ratios are their medians. 0 skips them: ratios then divide timings minutes apart",
    )
    p.add_argument("--clients", default="sdk,json", help="our server's clients: sdk, json or both")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="write all results as JSON")
    p.add_argument("--log-dir", type=Path, default=None, help="server logs (default: a temporary folder)")
    gpu_options.add_arguments(p)
    return p


def cpu_defaults(args: argparse.Namespace, p: argparse.ArgumentParser) -> argparse.Namespace:
    """The CPU run's defaults for the flags a device run fills in its own way (bench/gpu_options.py)."""
    args.corpus_size = args.corpus_size or 2048
    args.items = args.items or 2048
    args.raw_batch_sizes = args.raw_batch_sizes or [16, 32, 64, 128]
    args.raw_sweep_items = args.raw_sweep_items or 512
    if args.concurrency is None:
        args.concurrency = [1, 16] if args.quick else [1, 4, 16, 64]
    if args.request_items is None:
        args.request_items = [1, 32]
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if set(args.clients) - {"sdk", "json"}:
        p.error("--clients takes sdk and/or json")
    return args


def _cells(clients: list[str], concurrency: list[int], request_items: list[int]) -> list[CellSpec]:
    cells = []
    for client in clients:
        cells.append(CellSpec(client, 1, 1, "queries"))  # the latency target, on an idle server
        cells += [CellSpec(client, c, b) for c in concurrency for b in request_items]
    return cells


def _say(text: str) -> None:
    print(text, flush=True)


@dataclass(frozen=True)
class Workload:
    """What every server is measured on, the same for all of them."""

    data: corpus.Corpus
    reference: raw.Reference
    budget: Budget


async def _drive(
    server: servers.Server,
    senders: list[Sender],
    cells: list[CellSpec],
    threshold: float,
    work: Workload,
    run: ServerRun,
) -> None:
    data = work.data
    by_label = {s.label: s for s in senders}
    try:
        for sender in senders:
            gate = await correctness.check(server.name, sender, data, work.reference, threshold)
            run.gates.append(gate)
            _say(report.gate_line(gate))
        _say(report.CELL_HEADER)
        for spec in cells:
            texts, tokens = (
                (data.queries, data.query_tokens)
                if spec.pool == "queries"
                else (data.texts, data.text_tokens)
            )
            cell = await run_cell(
                server.name, server.pid, by_label[spec.client], spec, texts, tokens, work.budget
            )
            run.cells.append(cell)
            _say(report.cell_line(cell))
            if server.process.exit_code() is not None:
                raise RuntimeError(f"{server.name} died under load:\n{server.process.log_tail()}")
    finally:
        for sender in senders:
            await sender.aclose()


def _benchmark_server(
    runner: Callable[[Coroutine[Any, Any, None]], None],
    server: servers.Server,
    label: str,
    senders: list[Sender],
    cells: list[CellSpec],
    threshold: float,
    work: Workload,
) -> ServerRun:
    """Its gates and cells; the server keeps running (idle) for the paired rounds."""
    run = ServerRun(server.name, label, server.notes, server.startup_s, server.idle_rss_mb)
    _say(f"{label}: ready in {server.startup_s:.1f} s, idle RSS {server.idle_rss_mb:.0f} MB")
    runner(_drive(server, senders, cells, threshold, work, run))
    return run


def _our_senders(clients: str, server: servers.Server, max_conn: int) -> list[Sender]:
    senders: list[Sender] = []
    if "sdk" in clients:
        senders.append(SdkSender(server.base_url, server.model, max_conn))
    if "json" in clients:
        senders.append(JsonSender(server.base_url, server.json_route, server.model, max_conn))
    return senders


def _env_text(env: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{key}={value}" for key, value in env)


def _saturated_contender(server: servers.Server) -> paired.Contender:
    """Our server is measured through the SDK, Infinity (no msgpack SDK) through JSON."""
    max_conn = SATURATED.concurrency + 4
    if server.speaks_msgpack:
        return paired.Contender(
            server.name, server.pid, SdkSender(server.base_url, server.model, max_conn), SATURATED
        )
    sender = JsonSender(server.base_url, server.json_route, server.model, max_conn)
    return paired.Contender(server.name, server.pid, sender, SATURATED_JSON)


def _paired_phase(
    runner: Callable[[Coroutine[Any, Any, list[paired.Round]]], list[paired.Round]],
    args: argparse.Namespace,
    folder: Path,
    work: Workload,
    result: RunResult,
    running: list[servers.Server],
) -> list[paired.Round]:
    _say(f"\npaired rounds ({args.pairs}): raw limits and each saturated cell, back to back")
    limits = []
    for precision in dict.fromkeys((same_precision(result, args.precision), "float32")):
        batch = result.raw[precision].best_batch_size
        limits.append(paired.RawLimit(precision, raw.RawModel(folder, precision), batch))
    contenders = [_saturated_contender(server) for server in running]

    async def rounds() -> list[paired.Round]:
        try:
            return await paired.run_rounds(args.pairs, limits, contenders, work.data, work.budget, _say)
        finally:
            for contender in contenders:
                await contender.sender.aclose()

    return runner(rounds())


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _raw_phase(
    args: argparse.Namespace, folder: Path, data: corpus.Corpus, result: RunResult
) -> raw.Reference:
    """Raw limits (no server running) and the float32 reference vectors. The bf16 variants only
    where the CPU has bf16 hardware: elsewhere our server runs bfloat16 as float32, and emulated bf16
    would take minutes to measure for nothing."""
    from sie.adapters.runtime.device import cpu_has_bf16

    _say("raw sentence-transformers (no server running):")
    reference = None
    for precision in raw.PRECISIONS if cpu_has_bf16() else ("float32",):
        measured, model = raw.measure(
            folder,
            data.texts,
            data.text_tokens,
            data.queries,
            precision,
            args.raw_batch_sizes,
            args.raw_sweep_items,
            log=_say,
        )
        result.raw[precision] = measured
        if precision == "float32":
            sample = [data.texts[i] for i in data.check_sample]
            reference = raw.reference(model, sample, data.retrieval.queries, data.retrieval.passages)
        del model
        gc.collect()
    assert reference is not None
    return reference


def _corpus_summary(data: corpus.Corpus) -> dict[str, Any]:
    return {
        "texts": len(data.texts),
        "tokens": data.tokens_total,
        "mean_tokens": data.tokens_total / len(data.texts),
        "queries": len(data.queries),
        "mean_query_tokens": sum(data.query_tokens) / len(data.query_tokens),
        "retrieval_queries": len(data.retrieval.queries),
        "retrieval_passages": len(data.retrieval.passages),
    }


def run(args: argparse.Namespace) -> RunResult:
    folder = corpus.default_model_folder()
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="sie-bench-"))
    started = time.monotonic()
    infinity_cli, infinity_how = None, ""
    if args.infinity:  # install first: pip must not run while anything is measured
        infinity_cli, infinity_how = infinity_env.ensure(REPO_ROOT)
        _say(f"Infinity: {infinity_how}")

    version = _server_version(args.server_src)
    _say(f"our server's code: {version}")
    _say(f"corpus: seed {args.seed}, {args.corpus_size} texts, vocab from {folder}")
    data = corpus.build_corpus(folder, seed=args.seed, size=args.corpus_size, queries=args.query_count)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result = RunResult(config | {"server_version": version}, machine(), _corpus_summary(data), raw={})
    _say(f"  {data.tokens_total} tokens, mean {result.corpus['mean_tokens']:.1f} per text")
    reference = _raw_phase(args, folder, data, result)

    threshold = 0.99 if "int8" in args.model.lower() else 0.995
    work = Workload(data, reference, Budget(args.items, args.max_seconds))
    max_conn = max(args.concurrency) + 4
    running: list[servers.Server] = []
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            _say(f"\nour server: {args.model}, --precision {args.precision}")
            ours = servers.start_sie(
                args.model, args.precision, dict(args.server_env), log_dir, args.server_src
            )
            running.append(ours)
            senders = _our_senders(args.clients, ours, max_conn)
            cells = _cells(args.clients, args.concurrency, args.request_items)
            label = f"sie {args.precision}"
            if ours.effective_precision not in (None, args.precision):
                label += f" (ran as {ours.effective_precision})"
            result.servers.append(_benchmark_server(runner.run, ours, label, senders, cells, threshold, work))
            for extra in args.compare_env:
                other = _env_text(extra)
                _say(f"\nour server again, with {other}")
                variant = servers.start_sie(
                    args.model,
                    args.precision,
                    dict(args.server_env) | dict(extra),
                    log_dir,
                    args.server_src,
                    log_name=f"sie-server-{len(running)}.log",
                )
                variant.name = f"sie with {other}"
                running.append(variant)
                senders = _our_senders(args.clients, variant, max_conn)
                result.servers.append(
                    _benchmark_server(
                        runner.run, variant, f"{label} with {other}", senders, cells, threshold, work
                    )
                )
            if infinity_cli is not None:
                batch = args.infinity_batch_size or result.raw["float32"].best_batch_size
                _say(f"\nInfinity: {folder} (torch engine, always these weights)")
                inf = servers.start_infinity(
                    infinity_cli,
                    folder,
                    DEFAULT_MODEL,
                    batch,
                    args.infinity_dtype,
                    log_dir,
                    args.infinity_arg,
                )
                running.append(inf)
                inf.notes.append(f"installed with: {infinity_how}")
                sender = JsonSender(inf.base_url, inf.json_route, inf.model, max_conn)
                cells = _cells(["json"], args.concurrency, args.request_items)
                label = f"infinity {args.infinity_dtype}"
                result.servers.append(_benchmark_server(runner.run, inf, label, [sender], cells, 0.995, work))
            if args.pairs > 0 and "sdk" in args.clients:
                result.rounds = _paired_phase(runner.run, args, folder, work, result, running)
        time.sleep(SETTLE_S)  # our server trims freed memory after 1 s without work
        for server, run_result in zip(running, result.servers, strict=True):
            run_result.peak_rss_mb = procs.peak_rss_mb(server.pid)
            run_result.settled_rss_mb = procs.rss_mb(server.pid)
    finally:
        for server in running:
            server.stop()
    result.ratios = compute_ratios(result, args.precision)
    result.failures = [f for s in result.servers for g in s.gates for f in g.failures]
    result.config["elapsed_s"] = time.monotonic() - started
    result.config["log_dir"] = str(log_dir)
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The CPU run's arguments, defaults filled in."""
    p = build_parser()
    return cpu_defaults(p.parse_args(argv), p)


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["--host-path"]:  # its own flags (bench/host_path.py)
        from bench import host_path

        return host_path.main(given[1:])
    if given[:1] == ["--generate"]:  # its own flags (bench/generate.py)
        from bench import generate

        return generate.main(given[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even where the shell started us ignoring it
    try:
        if args.device is not None:
            from bench import gpu

            return gpu.main(args, parser, _server_version(None))
        result = run(cpu_defaults(args, parser))
    except KeyboardInterrupt:
        print("\ninterrupted; servers stopped", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"\nbenchmark aborted: {exc}", file=sys.stderr)
        return 2
    finally:
        procs.stop_all()
    report.print_servers(result)
    report.print_ratios(result)
    print("\n== summary (markdown) ==\n")
    print(report.summary_markdown(result))
    if args.json:
        report.write_json(result, args.json)
        print(f"\nJSON written to {args.json}")
    print(f"\nrun took {result.config['elapsed_s']:.0f} s; server logs in {result.config['log_dir']}")
    if result.failures:
        print("\nCORRECTNESS CHECKS FAILED:")
        for failure in result.failures:
            print(f"  - {failure}")
        return 1
    print("\nall correctness checks passed")
    return 0
