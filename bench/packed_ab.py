"""In-process A/B of the packed forward against the padded one, on one seeded random-weight shape.

Both encoders load the same weights through the server's own adapter (``loadtime.packed: false``
for the padded one) and run the same batches through the worker's ``ModelRunner``, so the padded side
gets the length chunks the server would give it. A batch is ``--batch`` corpus texts drawn at random
(a queue of mixed lengths), sorted by cost as the batcher hands it over. Rounds alternate which side
goes first; the answer is the median of the per-round ratios, with the largest cosine distance
between the two sides' vectors as the correctness gate. Prints the CPU class (or the GPU) it ran on.

    .venv/bin/python -m bench.packed_ab --shape xlmr-base --batch 64 --batches 4 --rounds 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

from bench import corpus, random_models
from bench.machine import machine
from sie.adapters.batch import Prepared
from sie.adapters.contract import Adapter, Forward, LoadSpec
from sie.adapters.dense_torch import TorchDenseEncoder
from sie.core.options import Capability, ComputePrecision, Pooling
from sie.engine.runner import BatchGroup, ModelRunner
from sie.postprocess.outputs import Postprocess

FORWARD = Forward(frozenset({Capability.DENSE}), pooling=Pooling.MEAN)
GROUP = BatchGroup(FORWARD, Postprocess(frozenset({Capability.DENSE})))


def batches_of(
    encoder: TorchDenseEncoder, texts: list[str], size: int, count: int, seed: int
) -> list[list[Prepared]]:
    rng = random.Random(seed)
    drawn = [rng.sample(texts, size) for _ in range(count)]
    return [sorted(encoder.prepare(batch, FORWARD), key=lambda item: item.cost) for batch in drawn]


def vectors(runner: ModelRunner, batches: list[list[Prepared]]) -> tuple[np.ndarray, float]:
    """Every batch's dense vectors (unit length) and the seconds the batches took together."""
    start = time.perf_counter()
    out = [item.dense for batch in batches for item in runner.run(batch, [GROUP] * len(batch))[0]]
    seconds = time.perf_counter() - start
    return np.stack([np.asarray(vector) for vector in out]), seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="xlmr-base", help=", ".join(random_models.SHAPES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="float32", choices=[p.value for p in ComputePrecision])
    parser.add_argument("--batch", type=int, default=64, help="texts per batch")
    parser.add_argument("--batches", type=int, default=4, help="batches per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-root", type=Path, default=None, help="where the random model is built")
    parser.add_argument(
        "--tokenizer-folder",
        type=Path,
        default=None,
        help="tokenizer files (and corpus vocabulary); default the packaged all-MiniLM-L6-v2 folder",
    )
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    shape = random_models.shape_named(args.shape)
    tokenizer = args.tokenizer_folder or corpus.default_model_folder()
    root = args.model_root or Path(tempfile.mkdtemp(prefix="sie-packed-ab-"))
    [built] = random_models.build([shape], tokenizer, root)
    precision = ComputePrecision(args.precision)
    sides = {
        name: TorchDenseEncoder.load(
            LoadSpec(built.folder, args.device, precision, shape.max_seq, loadtime={"packed": packed})
        )
        for name, packed in (("packed", True), ("padded", False))
    }
    assert sides["packed"].packs_tokens and not sides["padded"].packs_tokens
    # The class satisfies the protocol at run time; its class-level fields read as ClassVars to mypy.
    runners = {
        name: ModelRunner(cast(Adapter, encoder), random_models.MAX_BATCH_TOKENS)
        for name, encoder in sides.items()
    }
    texts = corpus.build_corpus(tokenizer, args.seed, args.corpus_size).texts
    batches = batches_of(sides["packed"], texts, args.batch, args.batches, args.seed)
    for runner in runners.values():  # warm-up: first-call allocations, oneDNN primitives
        vectors(runner, batches[:1])
    ratios: list[float] = []
    rates: dict[str, list[float]] = {"packed": [], "padded": []}
    worst = 0.0
    for round_ in range(args.rounds):
        order = ["packed", "padded"] if round_ % 2 == 0 else ["padded", "packed"]
        got = {name: vectors(runners[name], batches) for name in order}
        items = args.batch * args.batches
        for name, (_, seconds) in got.items():
            rates[name].append(items / seconds)
        ratios.append(got["padded"][1] / got["packed"][1])
        cosine = (got["packed"][0] * got["padded"][0]).sum(axis=1)
        worst = max(worst, float(1 - cosine.min()))
        print(
            f"round {round_}: packed {rates['packed'][-1]:.1f} items/s, padded {rates['padded'][-1]:.1f} items/s, "
            f"packed/padded {ratios[-1]:.2f}",
            flush=True,
        )
    tokens = [item.cost for batch in batches for item in batch]
    result = {
        "machine": machine(args.device),
        "shape": shape.name,
        "model_type": shape.model_type,
        "precision": precision.value,
        "batch": args.batch,
        "mean_tokens": round(float(np.mean(tokens)), 1),
        "packed_items_per_s": round(statistics.median(rates["packed"]), 2),
        "padded_items_per_s": round(statistics.median(rates["padded"]), 2),
        "packed_over_padded": round(statistics.median(ratios), 3),
        "max_cosine_distance": worst,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    result = run(build_parser().parse_args(argv))
    for key, value in result.items():
        print(f"{key}: {value}")
    return 0 if result["max_cosine_distance"] < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
