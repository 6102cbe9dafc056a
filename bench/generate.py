"""Generation: our server's continuous batching against raw transformers ``generate``, one run.

    scripts/bench --generate [--concurrency 1,8,32] [--new-tokens 64] [--json PATH]

A random-weight Qwen3 (``--hidden``, ``--layers``; the packaged MiniLM tokenizer, so the output
head is 30,522 wide as a real vocabulary makes it) is served by our server under the shipped
``Qwen/Qwen3-0.6B`` YAML. For each concurrency c, c clients each send ``--rounds`` greedy requests to
the native streaming route; output tokens/s is every request's ``completion_tokens`` over the cell's
wall time, time to first token is the client's (request sent to first chunk with text). The
baseline runs in this process while the server idles: ``model.generate`` on the same weights, one
prompt at a time for c = 1 and batches of c left-padded prompts otherwise (what a user of raw
transformers does). End-of-sequence is suppressed on both sides (``logit_bias`` / ``suppress_tokens``),
so every request makes exactly ``--new-tokens`` tokens. The issue's must-show is ours at c = 32 over
ours at c = 1 (>= 4x).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from bench import corpus, procs, servers

MODEL = "Qwen/Qwen3-0.6B"
REPO_ROOT = Path(__file__).resolve().parent.parent
PROMPTS = (
    "vector search finds the nearest neighbours of a query among many documents",
    "a reranker reads the query and each document together and scores the pair",
    "the quick brown fox jumps over the lazy dog near the river bank",
    "late interaction keeps one vector per token and matches them at query time",
)


@dataclass(frozen=True)
class Cell:
    side: str  # "ours" or "raw"
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def build_model(folder: Path, hidden: int, layers: int) -> Path:
    """A seeded Qwen3 with the packaged MiniLM tokenizer, saved as a generative model ships."""
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(corpus.default_model_folder()))
    heads = max(1, hidden // 64)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=64,
        intermediate_size=hidden * 3,
        max_position_embeddings=2048,
        eos_token_id=tokenizer.sep_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(folder)  # type: ignore[no-untyped-call]
    tokenizer.save_pretrained(folder)
    eos, pad = tokenizer.sep_token_id, tokenizer.pad_token_id
    GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False).save_pretrained(folder)  # type: ignore[no-untyped-call]
    return folder


def models_dir(root: Path, weights: Path) -> Path:
    folder = root / "models"
    folder.mkdir()
    name = "Qwen__Qwen3-0.6B.yaml"
    text = (REPO_ROOT / "src" / "sie" / "models" / name).read_text()
    text = text.replace("compute_precision: bfloat16", "compute_precision: float32")
    (folder / name).write_text(text + f"weights_path: {json.dumps(str(weights))}\n")
    return folder


async def _one(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[int, float]:
    """One streamed request: its completion tokens and the time to its first text."""
    sent = time.perf_counter()
    first: float | None = None
    tokens = 0
    async with client.stream("POST", f"/v1/generate/{MODEL.replace('/', '__')}", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("text_delta"):
                first = time.perf_counter()
            if chunk.get("error"):
                raise RuntimeError(chunk["error"])
            if chunk.get("done"):
                tokens = int(chunk["usage"]["completion_tokens"])
    return tokens, ((first or time.perf_counter()) - sent) * 1000


async def ours(url: str, concurrency: int, rounds: int, new_tokens: int, eos: int) -> Cell:
    body = {"max_new_tokens": new_tokens, "stream": True, "logit_bias": {str(eos): -100}}
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await _one(client, body | {"prompt": PROMPTS[0], "max_new_tokens": 2})  # warm

        async def worker(index: int) -> list[tuple[int, float]]:
            return [
                await _one(client, body | {"prompt": PROMPTS[(index + r) % len(PROMPTS)]})
                for r in range(rounds)
            ]

        start = time.perf_counter()
        results = [
            one for batch in await asyncio.gather(*(worker(i) for i in range(concurrency))) for one in batch
        ]
        seconds = time.perf_counter() - start
    ttfts = sorted(t for _, t in results)
    return Cell(
        "ours",
        concurrency,
        len(results),
        sum(n for n, _ in results),
        seconds,
        statistics.median(ttfts),
        ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))],
    )


def raw(weights: Path, concurrency: int, rounds: int, new_tokens: int) -> Cell:
    """transformers' ``generate``: c prompts per call, left-padded, greedy, EOS suppressed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(weights), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(weights), attn_implementation="sdpa").eval()  # type: ignore[no-untyped-call]
    eos = tokenizer.sep_token_id
    settings = {"max_new_tokens": new_tokens, "do_sample": False, "suppress_tokens": [eos]}

    def encoded(prompts: list[str]) -> Any:  # as the server tokenizes a prompt: no special tokens
        return tokenizer(
            prompts, return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False
        )

    with torch.no_grad():
        model.generate(**encoded([PROMPTS[0]]), max_new_tokens=2)  # warm
        tokens, ttfts = 0, []
        start = time.perf_counter()
        for r in range(rounds):
            prompts = [PROMPTS[(i + r) % len(PROMPTS)] for i in range(concurrency)]
            inputs = encoded(prompts)
            if concurrency == 1:  # the time to a first token: the prefill and one step
                first = time.perf_counter()
                model.generate(**inputs, **(settings | {"max_new_tokens": 1}))
                ttfts.append((time.perf_counter() - first) * 1000)
            out = model.generate(**inputs, **settings)
            tokens += int((out.shape[1] - inputs["input_ids"].shape[1]) * out.shape[0])
        seconds = time.perf_counter() - start - sum(ttfts) / 1000
    return Cell(
        "raw",
        concurrency,
        rounds * concurrency,
        tokens,
        seconds,
        statistics.median(ttfts) if ttfts else None,
        max(ttfts) if ttfts else None,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench --generate", description=__doc__)
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="requests per client per cell")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    root = Path(tempfile.mkdtemp(prefix="sie-bench-generate-"))
    weights = build_model(root / "weights", args.hidden, args.layers)
    eos = int(json.loads((weights / "config.json").read_text())["eos_token_id"])
    cells = [raw(weights, c, args.rounds, args.new_tokens) for c in levels]
    server = servers.start_sie(MODEL, "float32", {}, root, models_dir=models_dir(root, weights))
    try:
        cells += [asyncio.run(ours(server.base_url, c, args.rounds, args.new_tokens, eos)) for c in levels]
    finally:
        server.stop()
        procs.stop_all()
    print(f"generation, Qwen3 hidden {args.hidden} x {args.layers} layers, {args.new_tokens} new tokens")
    print(f"{'side':5} {'c':>3} {'reqs':>5} {'tokens/s':>10} {'ttft p50 ms':>12} {'ttft p95 ms':>12}")
    for cell in cells:
        p50 = f"{cell.ttft_p50_ms:.1f}" if cell.ttft_p50_ms is not None else "-"
        p95 = f"{cell.ttft_p95_ms:.1f}" if cell.ttft_p95_ms is not None else "-"
        print(
            f"{cell.side:5} {cell.concurrency:>3} {cell.requests:>5} {cell.tokens_per_s:>10.1f} {p50:>12} {p95:>12}"
        )
    by = {(c.side, c.concurrency): c.tokens_per_s for c in cells}
    ratios = {f"ours/raw c={c}": by["ours", c] / by["raw", c] for c in levels}
    if len(levels) > 1:
        ratios[f"ours c={levels[-1]} / ours c={levels[0]}"] = by["ours", levels[-1]] / by["ours", levels[0]]
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")
    if args.json is not None:
        result = {"cells": [asdict(c) | {"tokens_per_s": c.tokens_per_s} for c in cells], "ratios": ratios}
        args.json.write_text(json.dumps(result, indent=2))
    return 0
