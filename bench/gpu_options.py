"""The flags of a device run (``--device cuda``; ``--device cpu`` dry-runs the same code here), and
the one value object they become. Flags shared with the CPU run (``--seed``, ``--corpus-size``,
``--items``, ``--raw-batch-sizes``, ...) are parsed by bench/cli.py; their defaults differ per mode
and are filled in by ``resolve``."""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.random_models import Shape, shape_named

DEVICES: Final = ("cuda", "cpu")
SERVER_PRECISIONS: Final = ("float16", "bfloat16", "float32")
RAW_ALWAYS: Final = ("float32", "float16")  # the reference, and the raw limit the targets divide by
# 32 x 32 items in flight is 1024 items, above the server's default admission limit of 512 queued
# items per model (public behaviour on a CPU); a GPU clears 4096 in well under a second.
DEFAULT_SERVER_ENV: Final = {"SIE_MAX_CONCURRENT_REQUESTS": "4096"}


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("device mode (--device; see docs/benchmarks.md, GPU mode)")
    group.add_argument(
        "--device",
        choices=DEVICES,
        default=None,
        help="run the device benchmark on this device (cpu: a dry run of the same code)",
    )
    group.add_argument("--shapes", default="minilm,base", help="random-weight model shapes (minilm, base)")
    group.add_argument(
        "--precisions", default="float16", help="our server's precisions, one server each (float16, bfloat16)"
    )
    group.add_argument(
        "--raw-precisions",
        default=None,
        help="raw sentence-transformers precisions (default: float32, float16 and --precisions)",
    )
    group.add_argument(
        "--tokenizer-folder",
        type=Path,
        default=None,
        help="tokenizer files for the random models and the corpus vocabulary "
        "(default: the packaged all-MiniLM-L6-v2 folder)",
    )
    group.add_argument(
        "--model-root", type=Path, default=None, help="where the random models are written (default: temp)"
    )
    group.add_argument(
        "--gpu-peak-tflops",
        type=float,
        default=None,
        help="dense fp16/bf16 peak for the tokens/s fraction (default: looked up by GPU name)",
    )
    group.add_argument(
        "--loadgen-processes",
        type=int,
        default=None,
        help="processes of the many-small-requests load generator (default: cores / 4, 1 to 4)",
    )


@dataclass(frozen=True)
class DeviceOptions:
    device: str
    shapes: tuple[Shape, ...]
    precisions: tuple[str, ...]  # our server, one process each
    raw_precisions: tuple[str, ...]
    tokenizer_folder: Path | None
    model_root: Path
    log_dir: Path
    seed: int
    corpus_size: int
    query_count: int
    raw_batch_sizes: tuple[int, ...]
    raw_sweep_items: int
    items: int  # 32 x 32 sends this many items; 64 x 1 half as many requests
    max_seconds: float
    loadgen_processes: int
    peak_tflops: float | None
    server_env: dict[str, str]
    server_src: Path | None

    @property
    def single_requests(self) -> int:
        """Requests of the concurrency-1 cells: a 32nd of ``items``, between 32 and 256."""
        return min(256, max(32, self.items // 32))


def _checked(values: list[str], allowed: tuple[str, ...], flag: str, parser: argparse.ArgumentParser) -> None:
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        parser.error(f"{flag} takes a comma list of {', '.join(allowed)}; got {', '.join(bad) or 'nothing'}")


def resolve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> DeviceOptions:
    """Device-mode defaults for the shared flags, then validation of the device flags."""
    if args.infinity:
        parser.error("--infinity runs only in the CPU benchmark (no --device)")
    try:
        shapes = tuple(shape_named(name) for name in _names(args.shapes))
    except ValueError as exc:
        parser.error(str(exc))
    precisions = _names(args.precisions)
    _checked(precisions, SERVER_PRECISIONS, "--precisions", parser)
    raw = _names(args.raw_precisions) if args.raw_precisions else [*RAW_ALWAYS, *precisions]
    raw = list(dict.fromkeys(["float32", *raw]))  # float32 first: it makes the reference vectors
    _checked(raw, SERVER_PRECISIONS, "--raw-precisions", parser)
    processes = args.loadgen_processes or max(1, min(4, (os.cpu_count() or 1) // 4))
    return DeviceOptions(
        device=args.device,
        shapes=shapes,
        precisions=tuple(precisions),
        raw_precisions=tuple(raw),
        tokenizer_folder=args.tokenizer_folder,
        model_root=args.model_root or Path(tempfile.mkdtemp(prefix="sie-bench-models-")),
        log_dir=args.log_dir or Path(tempfile.mkdtemp(prefix="sie-bench-")),
        seed=args.seed,
        corpus_size=args.corpus_size or 4096,
        query_count=args.query_count,
        raw_batch_sizes=tuple(args.raw_batch_sizes or (64, 128, 256, 512)),
        raw_sweep_items=args.raw_sweep_items or 1024,
        items=args.items or 8192,
        max_seconds=args.max_seconds,
        loadgen_processes=processes,
        peak_tflops=args.gpu_peak_tflops,
        server_env={**DEFAULT_SERVER_ENV, **dict(args.server_env)},
        server_src=args.server_src,
    )
