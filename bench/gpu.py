"""``python -m bench --device cuda``: the GPU benchmark in one command (``--device cpu`` dry-runs the
same code on this machine).

Order of a run: random-weight models of the chosen shapes are built (bench/random_models.py) and the
seeded corpus drawn from their tokenizer's vocabulary; then, per shape, raw sentence-transformers at
each raw precision with no server running (each model freed before the next), then our server once
per precision, alone on the device: vector agreement, the load cells, GPU memory; stopped before the
next one starts. Concurrency-1 cells and the 64 x 1 and 32 x 32 cells go through the multi-process
HTTP/1.1 generator (bench/loadgen.py), so the client is not the limit; the 10-word query latency
target goes through our SDK, as in the CPU run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench import corpus, gpu_memory, gpu_options, random_models, raw, servers
from bench.flops import EncoderDims, flops_per_token, peak_tflops, token_weighted_mean_length
from bench.gpu_cells import Pool, agreement, run_cells, vectors_line
from bench.gpu_options import DeviceOptions
from bench.gpu_results import DeviceRun, ServerResult, ShapeResult, compute_targets, correctness_failures
from bench.machine import machine as describe_machine

CHECK_TEXTS = 128  # corpus texts whose vectors are compared with raw float32


def _say(text: str) -> None:
    print(text, flush=True)


def _release_device() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _raw_phase(
    built: random_models.BuiltModel,
    data: corpus.Corpus,
    sample: list[str],
    opts: DeviceOptions,
    shape: ShapeResult,
) -> np.ndarray:
    """Raw limits at every raw precision; returns the float32 vectors of the check texts."""
    reference: np.ndarray | None = None
    for precision in opts.raw_precisions:
        measured, model = raw.measure(
            built.folder,
            data.texts,
            data.text_tokens,
            data.queries,
            precision,
            opts.raw_batch_sizes,
            opts.raw_sweep_items,
            log=_say,
            device=opts.device,
        )
        shape.raw[precision] = measured
        vectors = model.encode(sample, 32)
        if reference is None:  # float32 comes first (gpu_options.resolve)
            reference = vectors
        shape.raw_min_cos[precision] = float(np.min(np.sum(vectors * reference, axis=1)))
        _say(
            f"  raw {precision:8s} min cosine to float32 over {len(sample)} texts: {shape.raw_min_cos[precision]:.6f}"
        )
        del model
        _release_device()
    assert reference is not None
    return reference


def _server_phase(
    built: random_models.BuiltModel,
    precision: str,
    data: corpus.Corpus,
    sample: list[str],
    reference: np.ndarray,
    opts: DeviceOptions,
) -> ServerResult:
    result = ServerResult(precision)
    _say(f"\n{built.model_id}: our server, {precision}, --device {opts.device}")
    baseline = gpu_memory.device_used_mb()
    server = None
    try:
        server = servers.start_sie(
            built.model_id,
            precision,
            opts.server_env,
            opts.log_dir,
            opts.server_src,
            device=opts.device,
            models_dir=built.yaml_path.parent,
            log_name=f"sie-{built.shape.name}-{precision}.log",
        )
        result.startup_s, result.notes = server.startup_s, server.notes
        result.effective_precision = server.effective_precision
        idle = gpu_memory.read(server.pid, baseline)
        if idle is not None:
            result.gpu_memory_idle_mb, result.gpu_memory_how = idle.mb, idle.how
        _say(f"  ready in {server.startup_s:.1f} s; {'; '.join(server.notes)}")
        with gpu_memory.PeakSampler(server.pid, baseline) as sampler, asyncio.Runner() as runner:
            result.agreement = runner.run(agreement(server, sample, reference))
            _say(f"  vectors: {vectors_line(result.agreement)}")
            corpus_pool, queries = Pool(data.texts, data.text_tokens), Pool(data.queries, data.query_tokens)
            result.cells, problems = run_cells(runner, server, corpus_pool, queries, opts, _say)
            result.error = "; ".join(problems)[:2000]
        peaks = [r.mb for r in (sampler.peak, idle) if r is not None]
        result.gpu_memory_peak_mb = max(peaks) if peaks else None
    except Exception as exc:  # one server's failure must not cost the other shapes' numbers
        tail = server.process.log_tail() if server is not None else ""
        result.error = f"{type(exc).__name__}: {exc}"[:2000]
        _say(f"  FAILED: {result.error}\n{tail}")
    finally:
        if server is not None:
            server.stop()
    return result


def _corpus_summary(data: corpus.Corpus) -> dict[str, Any]:
    return {
        "texts": len(data.texts),
        "tokens": data.tokens_total,
        "mean_tokens": data.tokens_total / len(data.texts),
        "token_weighted_mean_tokens": token_weighted_mean_length(data.text_tokens),
        "queries": len(data.queries),
        "mean_query_tokens": sum(data.query_tokens) / len(data.query_tokens),
    }


def _quiet_transformers() -> None:
    """Per-load progress bars and load reports from transformers would bury the numbers."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def run(
    opts: DeviceOptions, config: dict[str, Any], checkpoint: Callable[[DeviceRun], None] | None = None
) -> DeviceRun:
    """The whole run; ``checkpoint`` gets the partial result after each server, so a run cut short
    (a device lease ends) still leaves every number measured so far."""
    started = time.monotonic()
    _quiet_transformers()
    machine = describe_machine(opts.device)
    peak = opts.peak_tflops or peak_tflops(str(machine.get("gpu", "")))
    _say(
        f"device {opts.device}: {machine['gpu']}; peak {peak or 'unknown'} TFLOP/s; sie from {machine['sie_imported_from']}"
    )
    tokenizer = opts.tokenizer_folder or corpus.default_model_folder()
    config["tokenizer_folder"] = str(tokenizer)
    built = random_models.build(list(opts.shapes), tokenizer, opts.model_root)
    _say(f"models: {', '.join(b.model_id for b in built)} in {opts.model_root} (tokenizer {tokenizer})")
    data = corpus.build_corpus(tokenizer, seed=opts.seed, size=opts.corpus_size, queries=opts.query_count)
    run_result = DeviceRun(config, machine, _corpus_summary(data), peak)
    _say(f"corpus: seed {opts.seed}, {len(data.texts)} texts, {data.tokens_total} tokens")
    sample = data.texts[: min(CHECK_TEXTS, len(data.texts))]
    for model in built:
        dims = EncoderDims.from_config(model.folder / "config.json")
        per_token = {
            "corpus": flops_per_token(dims, token_weighted_mean_length(data.text_tokens)),
            "queries": flops_per_token(dims, token_weighted_mean_length(data.query_tokens)),
        }
        shape = ShapeResult(model.shape.name, model.model_id, dims, per_token)
        run_result.shapes.append(shape)
        _say(f"\n== {model.model_id}: {dims.non_embedding_params / 1e6:.1f} M non-embedding parameters ==")
        _say("raw sentence-transformers (no server running):")
        reference = _raw_phase(model, data, sample, opts, shape)
        for precision in opts.precisions:
            shape.servers.append(_server_phase(model, precision, data, sample, reference, opts))
            _conclude(run_result, started)
            if checkpoint is not None:
                checkpoint(run_result)
    _conclude(run_result, started)
    return run_result


def _conclude(run_result: DeviceRun, started: float) -> None:
    run_result.targets = compute_targets(run_result)
    run_result.failures = correctness_failures(run_result)
    run_result.config["elapsed_s"] = time.monotonic() - started


def _config(opts: DeviceOptions, version: str) -> dict[str, Any]:
    config = asdict(opts) | {"shapes": [s.name for s in opts.shapes], "sie_version": version}
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in config.items()}


def main(args: argparse.Namespace, parser: argparse.ArgumentParser, version: str) -> int:
    """The device run from parsed flags; bench/cli.py stops every server on the way out."""
    from bench import gpu_report

    opts = gpu_options.resolve(args, parser)
    json_path = args.json
    latest: list[DeviceRun] = []

    def checkpoint(partial: DeviceRun) -> None:
        latest[:] = [partial]
        if json_path is not None:
            gpu_report.write_json(partial, json_path)

    try:
        result = run(opts, _config(opts, version), checkpoint)
    except KeyboardInterrupt:  # a timeout's SIGTERM: show what was measured, then stop as asked
        if latest:
            print("\n== partial summary (interrupted after the last server that finished) ==\n")
            print(gpu_report.summary_markdown(latest[0]))
            gpu_report.print_targets(latest[0])
        raise
    print("\n== summary (markdown) ==\n")
    print(gpu_report.summary_markdown(result))
    gpu_report.print_targets(result)
    if args.json:
        gpu_report.write_json(result, args.json)
        print(f"\nJSON written to {args.json}")
    print(f"\nrun took {result.config['elapsed_s']:.0f} s; server logs in {opts.log_dir}")
    if result.failures:
        print("\nFAILED (servers or cells that did not run, vector targets not met):")
        for failure in result.failures:
            print(f"  - {failure}")
        return 1
    print("\nevery server ran and every vector target was met")
    return 0
