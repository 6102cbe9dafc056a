"""Generation: our server's continuous batching against raw transformers ``generate``, one run.

    scripts/bench --generate [--concurrency 1,8,32] [--max-new-tokens 64] [--requests 64] [--cores N]
                             [--architecture qwen3|qwen3_5] [--weights DIR] [--model ID] [--json PATH]
                             [--device cuda] [--tokenizer-folder DIR]

A random-weight Qwen3 (``--hidden``, ``--layers``; the packaged MiniLM tokenizer, so the output head
is 30,522 wide as a real vocabulary makes it; bench/random_models.py), or the weights in ``--weights``,
is served by our server under the shipped catalogue YAML of ``--model`` (``Qwen/Qwen3-0.6B``) at
float32: transformers' continuous batching. ``--architecture qwen3_5`` builds Qwen3.5's hybrid
instead (linear-attention layers) under ``Qwen/Qwen3.5-4B``'s YAML: the engine of padded batches on
``generate``. For each concurrency c, ``--requests`` greedy, grammar-free requests (request k takes prompt
k of a fixed set of four, round-robin) go to the native streaming route (``POST /v1/generate/<id>``,
``stream: true``) from c clients, each sending its next request when its last one has finished. Per cell: output tokens/s (every request's ``completion_tokens`` over the cell's wall time), the
client's time to first token (request sent to the first chunk with text) p50/p95 and each request's
own tokens/s (its tokens over its own duration). Every answer is checked: status 200, chunks numbered
0, 1, ..., one final chunk with usage, ``[DONE]``, and exactly ``--max-new-tokens`` tokens; a cell that
does not finish within ``--cell-timeout`` aborts the run (exit status 2) with what had finished.

The baseline runs in this process before the server starts: ``model.generate`` on the same weights,
one prompt at a time for c = 1 and batches of c left-padded prompts otherwise (what a user of raw
transformers does); its time to first token is a 1-token ``generate`` of the same batch (not counted
in its tokens/s). End-of-sequence is suppressed on both sides (``logit_bias`` -100 / ``suppress_tokens``)
so every request makes exactly ``--max-new-tokens`` tokens and both sides do the same work. Our texts
are compared with the raw one-at-a-time greedy text of the same prompt (``greedy_match``, reported, not
gated: a float32 near-tie may flip under another kernel or batch shape).

The issue's must-show: ours at the largest c over ours at c = 1 >= 4x, with the raw baseline in the
same run. ``--device cuda`` runs both sides on the GPU (the GPU kit's session runs it so, with the
kit's tokenizer folder). ``--cores N`` pins the server (and the raw baseline, with N torch threads) to
the first N cores and the load generator to the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import corpus, procs, random_models, servers
from bench.machine import machine, server_version
from bench.stats import percentiles_ms

MODEL = "Qwen/Qwen3-0.6B"
HYBRID_MODEL = "Qwen/Qwen3.5-4B"  # its linear-attention layers: the padded engine on ``generate``
REPO_ROOT = Path(__file__).resolve().parent.parent
MUST_SHOW = 4.0  # ours at the largest concurrency over ours at 1 (issue 40)
PROMPTS = (
    "vector search finds the nearest neighbours of a query among many documents",
    "a reranker reads the query and each document together and scores the pair",
    "the quick brown fox jumps over the lazy dog near the river bank",
    "late interaction keeps one vector per token and matches them at query time",
)


class ServerFault(RuntimeError):
    """Our server answered wrongly or not at all: the run stops and says what it saw."""


@dataclass(frozen=True)
class Cell:
    side: str  # "ours" or "raw"
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    request_tokens_per_s_p50: float  # each request's tokens over its own duration, median
    other_cores: float  # CPU used by anything but the server and this process, cores (noise)
    server_cores: float | None = None  # ours: cores the server kept busy during the cell
    greedy_match: int | None = None  # ours: requests whose text equals the raw 1-at-a-time text

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


@dataclass(frozen=True)
class Answer:
    prompt: int
    tokens: int
    ttft_s: float
    total_s: float
    text: str


def models_dir(root: Path, weights: Path, model: str = MODEL) -> Path:
    """A models dir holding ``model``'s catalogue YAML at float32, pointed at ``weights``."""
    folder = root / "models"
    folder.mkdir()
    name = model.replace("/", "__") + ".yaml"
    text = (REPO_ROOT / "src" / "sie" / "models" / name).read_text()
    text = re.sub(r"compute_precision: \w+", "compute_precision: float32", text)
    (folder / name).write_text(text + f"weights_path: {json.dumps(str(weights.resolve()))}\n")
    return folder


def _eos(weights: Path) -> int:
    for name in ("generation_config.json", "config.json"):
        path = weights / name
        if path.exists():
            eos = json.loads(path.read_text()).get("eos_token_id")
            if eos is not None:
                return int(eos[0] if isinstance(eos, list) else eos)
    raise ValueError(f"{weights} names no eos_token_id")


def _same_text(a: str, b: str) -> bool:
    """Equal but for whitespace (a stream's deltas and a whole decode may space word pieces apart)."""
    return "".join(a.split()) == "".join(b.split())


class _Noise:
    """CPU seconds used meanwhile by everything but ``pid`` (the server, if any) and this process."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self.started = time.perf_counter()
        self.busy, self.own = procs.machine_busy_seconds(), procs.own_cpu_seconds()
        self.server = procs.cpu_seconds(pid) if pid else 0.0

    def read(self) -> tuple[float, float]:
        """(other cores, server cores) averaged over the time since construction."""
        seconds = time.perf_counter() - self.started
        server = (procs.cpu_seconds(self.pid) if self.pid else 0.0) - self.server
        busy = procs.machine_busy_seconds() - self.busy
        own = procs.own_cpu_seconds() - self.own
        return max(0.0, busy - server - own) / seconds, server / seconds


# --- ours -----------------------------------------------------------------------------------------


async def _one(client: httpx.AsyncClient, route: str, body: dict[str, Any], prompt: int) -> Answer:
    """One streamed request, checked: its tokens, time to first text, duration and text."""
    sent = time.perf_counter()
    first: float | None = None
    texts: list[str] = []
    final: dict[str, Any] | None = None
    seqs: list[int] = []
    closed = False
    async with client.stream("POST", route, json=body) as response:
        if response.status_code != 200:
            detail = (await response.aread()).decode(errors="replace")[:500]
            raise ServerFault(f"HTTP {response.status_code} on prompt {prompt}: {detail}")
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                closed = True
                continue
            chunk = json.loads(line[6:])
            if chunk.get("error"):
                raise ServerFault(f"error chunk on prompt {prompt}: {chunk['error']}")
            seqs.append(int(chunk["seq"]))
            if chunk.get("text_delta"):
                first = first or time.perf_counter()
                texts.append(chunk["text_delta"])
            if chunk.get("done"):
                if final is not None:
                    raise ServerFault(f"two final chunks on prompt {prompt}: {final} and {chunk}")
                final = chunk
    done = time.perf_counter()
    if final is None or not closed:
        raise ServerFault(f"stream of prompt {prompt} ended without a final chunk and [DONE] (seq {seqs})")
    if seqs != list(range(len(seqs))):
        raise ServerFault(f"chunks of prompt {prompt} out of order or missing: seq {seqs}")
    tokens = int(final["usage"]["completion_tokens"])
    if tokens != body["max_new_tokens"] or final.get("finish_reason") != "length":
        raise ServerFault(
            f"prompt {prompt}: {tokens} tokens, finish_reason {final.get('finish_reason')!r}; asked for "
            f"{body['max_new_tokens']} with end-of-sequence suppressed (final chunk {final})"
        )
    return Answer(prompt, tokens, (first or done) - sent, done - sent, "".join(texts))


async def ours(
    url: str,
    model: str,
    concurrency: int,
    requests: int,
    new_tokens: int,
    eos: int,
    server_pid: int | None = None,
    references: Sequence[str] = (),
    cell_timeout_s: float = 600.0,
) -> Cell:
    """c clients; client i sends requests i, i + c, i + 2c, ... < ``requests``, one after another."""
    route = f"/v1/generate/{model.replace('/', '__')}"
    body = {"max_new_tokens": new_tokens, "stream": True, "temperature": 0, "logit_bias": {str(eos): -100}}
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=cell_timeout_s, limits=limits) as client:
        warm = body | {"prompt": PROMPTS[0], "max_new_tokens": 2}
        await _one(client, route, warm, 0)
        finished: list[Answer] = []

        async def worker(index: int) -> None:
            for k in range(index, requests, concurrency):
                prompt = k % len(PROMPTS)
                finished.append(await _one(client, route, body | {"prompt": PROMPTS[prompt]}, prompt))

        noise = _Noise(server_pid)
        start = time.perf_counter()
        try:
            await asyncio.wait_for(
                asyncio.gather(*(worker(i) for i in range(concurrency))), timeout=cell_timeout_s
            )
        except TimeoutError:
            raise ServerFault(
                f"c={concurrency}: only {len(finished)} of {requests} requests finished in "
                f"{cell_timeout_s:.0f} s"
            ) from None
        seconds = time.perf_counter() - start
        other, server = noise.read()
    p50, p95, _, _ = percentiles_ms([a.ttft_s for a in finished])
    per_request, _, _, _ = percentiles_ms([a.total_s / a.tokens for a in finished])
    matched = sum(_same_text(a.text, references[a.prompt]) for a in finished) if references else None
    return Cell(
        "ours",
        concurrency,
        len(finished),
        sum(a.tokens for a in finished),
        seconds,
        p50,
        p95,
        1000.0 / per_request,
        other,
        server if server_pid else None,
        matched,
    )


# --- raw transformers -----------------------------------------------------------------------------


class Raw:
    """transformers' ``generate`` on ``weights`` in this process: greedy, left-padded, EOS suppressed."""

    def __init__(self, weights: Path, new_tokens: int, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(str(weights), padding_side="left")
        model: Any = AutoModelForCausalLM.from_pretrained(str(weights), attn_implementation="sdpa")
        self.model = model.eval().to(device)
        self.new_tokens = new_tokens
        self.settings = {"max_new_tokens": new_tokens, "do_sample": False, "suppress_tokens": [_eos(weights)]}

    def encoded(self, prompts: list[str]) -> Any:  # as the server tokenizes a prompt: no special tokens
        return self.tokenizer(
            prompts, return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False
        ).to(self.device)

    def _synchronize(self) -> None:
        """Timings end when the device has finished, not when its work was queued."""
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def texts(self) -> list[str]:
        """Each prompt's greedy text, one at a time (what our answers are compared with)."""
        out: list[str] = []
        with self.torch.no_grad():
            for prompt in PROMPTS:
                inputs = self.encoded([prompt])
                ids = self.model.generate(**inputs, **self.settings)[0, inputs["input_ids"].shape[1] :]
                out.append(str(self.tokenizer.decode(ids, skip_special_tokens=True)))
        return out

    def cell(self, concurrency: int, requests: int) -> Cell:
        """``requests`` prompts in calls of c (the last call may hold fewer); the time to first token
        is a 1-token call of the same batch just before (its time is left out of tokens/s)."""
        tokens, ttfts, durations, seconds = 0, [], [], 0.0
        with self.torch.no_grad():
            self.model.generate(**self.encoded([PROMPTS[0]]), max_new_tokens=2)  # warm
            noise = _Noise()
            for head in range(0, requests, concurrency):
                ks = range(head, min(head + concurrency, requests))
                inputs = self.encoded([PROMPTS[k % len(PROMPTS)] for k in ks])
                first = time.perf_counter()
                self.model.generate(**inputs, **(self.settings | {"max_new_tokens": 1}))
                self._synchronize()
                start = time.perf_counter()
                out = self.model.generate(**inputs, **self.settings)
                self._synchronize()
                took = time.perf_counter() - start
                made = out.shape[1] - inputs["input_ids"].shape[1]
                if made != self.new_tokens:
                    raise RuntimeError(f"raw generate made {made} tokens, not {self.new_tokens}")
                tokens += made * out.shape[0]
                seconds += took
                ttfts += [start - first] * len(ks)  # every row of the batch waits for the same step
                durations += [took / made] * len(ks)
            other, _ = noise.read()
        p50, p95, _, _ = percentiles_ms(ttfts)
        per_request, _, _, _ = percentiles_ms(durations)
        return Cell("raw", concurrency, requests, tokens, seconds, p50, p95, 1000.0 / per_request, other)


# --- the run --------------------------------------------------------------------------------------


def ratios(cells: Sequence[Cell], levels: Sequence[int]) -> dict[str, float]:
    by = {(c.side, c.concurrency): c.tokens_per_s for c in cells}
    out = {f"ours/raw c={c}": by["ours", c] / by["raw", c] for c in levels}
    low, high = min(levels), max(levels)
    if high != low:
        out[f"ours c={high} / ours c={low}"] = by["ours", high] / by["ours", low]
        out[f"raw c={high} / raw c={low}"] = by["raw", high] / by["raw", low]
    return out


def table(cells: Sequence[Cell]) -> str:
    lines = [
        "| side | c | requests | tokens | tokens/s | per-request tokens/s p50 | TTFT p50 ms | TTFT p95 ms "
        "| greedy = raw | server cores | other cores |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        side = "ours" if c.side == "ours" else "raw `generate`"
        match = f"{c.greedy_match}/{c.requests}" if c.greedy_match is not None else "-"
        server = f"{c.server_cores:.2f}" if c.server_cores is not None else "-"
        lines.append(
            f"| {side} | {c.concurrency} | {c.requests} | {c.tokens} | {c.tokens_per_s:.1f} | "
            f"{c.request_tokens_per_s_p50:.1f} | {c.ttft_p50_ms:.1f} | {c.ttft_p95_ms:.1f} | {match} | "
            f"{server} | {c.other_cores:.2f} |"
        )
    return "\n".join(lines)


def _cpus(cores: int | None) -> tuple[list[int] | None, list[int] | None]:
    """(server and raw baseline, load generator) CPUs for ``--cores``; (None, None) pins nothing."""
    if cores is None:
        return None, None
    every = sorted(os.sched_getaffinity(0))
    if not 1 <= cores <= len(every):
        raise ValueError(f"--cores {cores}: this process may use {len(every)} cores")
    return every[:cores], every[cores:] or None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/bench --generate", description=__doc__)
    p.add_argument(
        "--model",
        default=None,
        help=f"catalogue id whose YAML (src/sie/models) serves the weights (default: {MODEL}, or "
        f"{HYBRID_MODEL} for --architecture qwen3_5)",
    )
    p.add_argument(
        "--architecture",
        choices=random_models.CAUSAL_ARCHITECTURES,
        default="qwen3",
        help="of the built model: qwen3 (continuous batching) or qwen3_5 (padded batches on generate)",
    )
    p.add_argument("--weights", type=Path, default=None, help="a causal LM folder (default: build one)")
    p.add_argument("--hidden", type=int, default=256, help="width of the built model")
    p.add_argument(
        "--device", default="cpu", help="where our server and the raw baseline run (cpu, cuda, cuda:1, ...)"
    )
    p.add_argument(
        "--tokenizer-folder",
        type=Path,
        default=None,
        help="the built model's tokenizer (default: the packaged all-MiniLM-L6-v2; a GPU machine has none)",
    )
    p.add_argument("--layers", type=int, default=4, help="layers of the built model")
    p.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    p.add_argument("--max-new-tokens", "--new-tokens", dest="new_tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=64, help="requests per cell, at every concurrency")
    p.add_argument("--cores", type=int, default=None, help="pin the server and the raw baseline to N cores")
    p.add_argument(
        "--server-src",
        type=Path,
        default=None,
        help="a src/ folder put first on our server's PYTHONPATH (e.g. an export of another commit)",
    )
    p.add_argument("--cell-timeout", type=float, default=600.0, help="seconds before a cell counts as hung")
    p.add_argument("--log-dir", type=Path, default=None, help="server log and built model (default: temp)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the result as JSON")
    return p


def run(args: argparse.Namespace, levels: list[int], say: Any = print) -> dict[str, Any]:
    root = Path(args.log_dir or tempfile.mkdtemp(prefix="sie-bench-generate-"))
    root.mkdir(parents=True, exist_ok=True)
    weights = args.weights or random_models.build_causal_lm(
        root / "weights",
        args.hidden,
        args.layers,
        args.tokenizer_folder or corpus.default_model_folder(),
        architecture=args.architecture,
    )
    eos = _eos(weights)
    server_cpus, client_cpus = _cpus(args.cores)
    started = time.monotonic()
    cells: list[Cell] = []
    with procs.pinned(server_cpus):  # the raw baseline on the server's cores, as many threads
        import torch

        threads = torch.get_num_threads()
        if server_cpus:
            torch.set_num_threads(len(server_cpus))
        try:
            raw = Raw(weights, args.new_tokens, args.device)
            references = raw.texts()
            for c in levels:
                cells.append(raw.cell(c, args.requests))
                say(f"raw c={c}: {cells[-1].tokens_per_s:.1f} tokens/s")
            del raw
        finally:
            torch.set_num_threads(threads)
    server = servers.start_sie(
        args.model,
        "float32",
        {},
        root,
        args.server_src,
        models_dir=models_dir(root, weights, args.model),
        cpus=server_cpus,
        device=args.device,
    )
    say(f"our server: ready in {server.startup_s:.1f} s, idle RSS {server.idle_rss_mb:.0f} MB")
    try:
        with procs.pinned(client_cpus):
            for c in levels:
                cell = asyncio.run(
                    ours(
                        server.base_url,
                        args.model,
                        c,
                        args.requests,
                        args.new_tokens,
                        eos,
                        server.pid,
                        references,
                        args.cell_timeout,
                    )
                )
                cells.append(cell)
                say(f"ours c={c}: {cell.tokens_per_s:.1f} tokens/s")
                if server.process.exit_code() is not None:
                    raise ServerFault(f"our server died under load:\n{server.process.log_tail()}")
    except ServerFault as exc:
        raise ServerFault(f"{exc}\nserver log: {server.process.log_path}") from None
    finally:
        server.stop()
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    return {
        "config": config | {"levels": levels, "weights": str(weights), "log_dir": str(root)},
        "server_version": server_version(args.server_src),
        "machine": machine(),
        "elapsed_s": time.monotonic() - started,
        "cells": [asdict(c) | {"tokens_per_s": c.tokens_per_s} for c in cells],
        "ratios": ratios(cells, levels),
    }


def summary(result: dict[str, Any]) -> str:
    cells = [Cell(**{k: v for k, v in c.items() if k != "tokens_per_s"}) for c in result["cells"]]
    cfg, mach = result["config"], result["machine"]
    built = (
        "--weights " + cfg["weights"] if cfg["weights_given"] else f"hidden {cfg['hidden']} x {cfg['layers']}"
    )
    lines = [
        f"generation: {cfg['model']} YAML, random {cfg['architecture']} {built}, float32 on "
        f"{cfg['device']}, {cfg['new_tokens']} new tokens, {cfg['requests']} requests per cell; {mach.get('cpu', '?')}, {mach.get('cores', '?')} cores"
        + (f", pinned to {cfg['cores']}" if cfg["cores"] else "")
        + f"; server code {result['server_version']}",
        "",
        table(cells),
        "",
    ]
    levels = cfg["levels"]
    for name, value in result["ratios"].items():
        lines.append(f"- {name}: {value:.2f}x")
    low, high = min(levels), max(levels)
    if high != low:
        gain = result["ratios"][f"ours c={high} / ours c={low}"]
        verdict = "met" if gain >= MUST_SHOW else "NOT met"
        lines.append(f"- must-show (ours c={high} >= {MUST_SHOW:.0f}x ours c={low}): {gain:.2f}x, {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.weights_given = args.weights is not None
    args.model = args.model or (HYBRID_MODEL if args.architecture == "qwen3_5" else MODEL)
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    if not levels or min(levels) < 1 or args.requests < 1 or args.new_tokens < 1:
        parser.error("--concurrency, --requests and --max-new-tokens take positive numbers")
    try:
        result = run(args, levels)
    except (ServerFault, RuntimeError, ValueError) as exc:
        print(f"\nbenchmark aborted: {exc}", flush=True)
        return 2
    finally:
        procs.stop_all()
    print("\n== summary (markdown) ==\n")
    print(summary(result))
    print(f"\nrun took {result['elapsed_s']:.0f} s; server log and model in {result['config']['log_dir']}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"JSON written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
