"""``score``: items ranked against a query, by a cross-encoder's pair scores or by the similarity of
embeddings (``engine.score_plan``), each text prepared as an encode request would prepare it (the
profile's templates and instruction, ``is_query`` for the query)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TypeVar

import numpy as np

from sie.adapters.batch import MediaPair, ModelInput
from sie.adapters.contract import Forward
from sie.catalog.admit import admit_score
from sie.catalog.encode_plan import plan_encode
from sie.catalog.score_plan import ScorePlan
from sie.core.options import Capability, Modality, OverflowPolicy
from sie.core.task import Task
from sie.engine.errors import RefusedItem
from sie.engine.infer import Inference
from sie.engine.inputs import encode_input, encode_task, pair_side
from sie.engine.ops.parts import Answer, Parts, check_outputs, item_id
from sie.engine.registry import Held
from sie.engine.runner import BatchGroup
from sie.postprocess.outputs import Postprocess
from sie.postprocess.similarity import cosine, maxsim, sparse_dot
from sie.wire.requests import ScoreRequest
from sie.wire.responses import ScoreEntry, ScoreResponse

T = TypeVar("T")


async def score(
    parts: Parts, model: str, request: ScoreRequest, wait_loaded: bool = False
) -> Answer[ScoreResponse]:
    started = time.perf_counter()
    query, items, options = request.query, request.items, request.options
    admitted = admit_score(parts.admission, model, request)
    entry, plan, lora_id = admitted.entry, admitted.plan, admitted.lora_id
    name = entry.name
    if wait_loaded:
        await parts.registry.wait_loaded(name)
    with parts.registry.hold(name) as held, parts.registry.lora(held, lora_id) as lora:
        if plan.weights is None:
            check_outputs(held, frozenset({Capability.SCORE}))
            # The request's instruction reaches the pair scorer, which places it as its model was
            # trained (a cross-encoder before the query, a Qwen3 reranker in its <Instruct> slot).
            task = Task(instruction=request.instruction) if request.instruction else None
            forward = Forward(frozenset({Capability.SCORE}), task=task, lora=lora, overflow=admitted.overflow)
            group = BatchGroup(forward, Postprocess(frozenset()))
            adapter = held.model.adapter
            pairs: list[ModelInput]
            if Modality.IMAGE in adapter.inputs:  # each side its text or its image (Qwen3-VL's reranker)
                asked = pair_side(query, name, adapter)
                pairs = [MediaPair(asked, pair_side(item, name, adapter)) for item in items]
            else:
                pairs = [(str(query.text), str(item.text)) for item in items]
            inference = await parts.infer(held, pairs, group)
            scores = np.array([r.outputs.score for r in inference.results], dtype=np.float32)
        else:
            query_plan, doc_plan = (
                plan_encode(
                    name,
                    entry.config.output_types(),
                    entry.profile.runtime,
                    {**(options or {}), "is_query": is_query},
                    output_types=list(plan.weights),
                    instruction=request.instruction,
                )
                for is_query in (True, False)
            )
            adapter = held.model.adapter
            # A model that takes images scores page images too (ColPali): each item's image, else its text.
            documents = [encode_input(doc_plan, item, name, adapter) for item in items]
            query_input = encode_input(query_plan, query, name, adapter)
            lengths = (query_plan.max_length, doc_plan.max_length)
            tasks = (encode_task(query_plan, adapter), encode_task(doc_plan, adapter))
            scores, inference = await _similarity(
                parts, held, plan, query_input, documents, lora, lengths, tasks, admitted.overflow
            )
    timing = inference.timing(started, postprocessed=False)
    parts.observe(model, "score", timing)
    ids = [item_id(item.id, i) for i, item in enumerate(items)]
    response = ScoreResponse(name, query.id, ranked(ids, scores), inference.score_usage())
    return Answer(response, timing, inference.tokens)


async def _similarity(
    parts: Parts,
    held: Held,
    plan: ScorePlan,
    query: ModelInput,
    documents: list[ModelInput],
    lora: str | None,
    lengths: tuple[int | None, int | None],
    tasks: tuple[Task | None, Task | None],
    overflow: OverflowPolicy,
) -> tuple[np.ndarray, Inference]:
    """The weighted sum of each similarity the plan names, one score per document (in order); the
    query and the documents each keep to their own requested length (``lengths``) and instruction
    (``tasks``, for a family that places it itself)."""
    assert plan.weights is not None
    outputs = frozenset(plan.weights)
    check_outputs(held, outputs)

    def group(is_query: bool) -> BatchGroup:
        side = 0 if is_query else 1
        return BatchGroup(
            Forward(
                outputs,
                is_query=is_query,
                task=tasks[side],
                lora=lora,
                max_length=lengths[side],
                overflow=overflow,
            ),
            Postprocess(outputs),
        )

    async def ask() -> Inference:
        try:
            return await parts.infer(held, [query], group(True))
        except RefusedItem as exc:  # the query, not the request's first item
            raise RefusedItem(exc.error, None) from None

    asked, answered = await asyncio.gather(ask(), parts.infer(held, documents, group(False)))
    q = asked.results[0].outputs
    docs = [r.outputs for r in answered.results]
    total = np.zeros(len(documents), dtype=np.float32)
    for capability, weight in plan.weights.items():
        if capability is Capability.DENSE:
            assert q.dense is not None
            part = cosine(q.dense, np.stack([_present(d.dense) for d in docs]))
        elif capability is Capability.SPARSE:
            assert q.sparse is not None
            part = sparse_dot(q.sparse, [_present(d.sparse) for d in docs])
        else:
            assert q.multivector is not None
            part = maxsim(q.multivector, [_present(d.multivector) for d in docs])
        total += weight * part
    # Billed per pair, as the public server bills an embedding model's score: the query's tokens
    # once for each document beside the document's own (the query is still encoded once).
    pairs = replace(
        Inference.joined([asked, answered]), tokens=asked.tokens * len(documents) + answered.tokens
    )
    return total, pairs


def _present(value: T | None) -> T:
    """Every document has every output asked for (the forward computed them for the whole batch); a
    missing one would shift scores against ids, so it fails loudly instead of being skipped."""
    if value is None:
        raise AssertionError("a document came back without the output its score needs")
    return value


def ranked(item_ids: list[str], scores: np.ndarray) -> list[ScoreEntry]:
    """Best first; equal scores keep the request's order."""
    order = np.argsort(-scores, kind="stable")
    return [ScoreEntry(item_ids[i], float(scores[i]), rank) for rank, i in enumerate(order)]
