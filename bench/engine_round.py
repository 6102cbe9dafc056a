"""One round for ``bench/engine_ab.py`` (run in a fresh process per source tree): one round of the engine's dense path in process: 32 concurrent requests of 16 corpus texts, then
100 single 10-word queries one at a time. Prints items/s and the query p50 in ms."""

import asyncio
import importlib
import importlib.util
import random
import statistics
import sys
import time
from pathlib import Path

import sie
import sie.engine.engine as engine_module
from sie.core.options import ComputePrecision
from sie.engine.engine import Engine, EngineLimits
from sie.engine.loader import LoadSettings
from sie.observability.metrics import Metrics
from sie.weights.sources import WeightSources
from sie.wire.requests import EncodeRequest, Item

# The catalogue moved out of the engine into its own layer: a tree from before has it in the engine.
_CATALOG = "sie.catalog.catalog" if importlib.util.find_spec("sie.catalog") else "sie.engine.catalog"
Catalog = importlib.import_module(_CATALOG).Catalog

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
rng = random.Random(int(sys.argv[1]))
vocab = (Path(sys.argv[2]) / "vocab.txt").read_text().split()
words = [w for w in vocab if w.isalpha() and len(w) > 2]
texts = [" ".join(rng.choices(words, k=rng.randint(5, 200))) for _ in range(512)]
queries = [" ".join(rng.choices(words, k=10)) for _ in range(100)]


async def encode(engine: Engine, batch: list[str]) -> object:
    """One encode request, through whichever engine API the tree under test has (A/B across the change
    that made operations take wire requests)."""
    items = [Item(text=t) for t in batch]
    if hasattr(engine_module, "Answer"):
        return await engine.encode(MINILM, EncodeRequest(items=items))
    return await engine.encode(MINILM, items, None)  # type: ignore[call-arg, arg-type]


async def main() -> None:
    load = LoadSettings("cpu", ComputePrecision.FLOAT32, 2, WeightSources(None, False))
    catalog = Catalog.from_directory(Path(sie.__file__).parent / "models", [MINILM])
    engine = Engine(catalog, load, EngineLimits(64, 10, 4096, 2), Metrics())
    await engine.preload([MINILM])
    await encode(engine, texts[:16])
    start = time.perf_counter()
    batches = [texts[i : i + 16] for i in range(0, 512, 16)]
    await asyncio.gather(*(encode(engine, b) for b in batches))
    rate = 512 / (time.perf_counter() - start)
    lat = []
    for q in queries:
        t0 = time.perf_counter()
        await encode(engine, [q])
        lat.append((time.perf_counter() - t0) * 1000)
    print(f"{rate:.1f} {statistics.median(lat):.2f}")
    await engine.close()


asyncio.run(main())
