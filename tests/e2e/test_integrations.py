"""The public framework integrations, unchanged, against our server: ``sie-langchain``,
``sie-llamaindex`` and ``sie-haystack`` 0.10.1 from PyPI.

They need Python >= 3.12 (they call the public ``sie-sdk``), so they run in the public venv (the
``public_python`` fixture of tests/conftest.py builds ``$SIE_PUBLIC_VENV`` once from a lock). Each
integration gets one script that uses its classes the way the framework's users do (embedders,
rerankers, sparse encoders, and an in-memory vector store or pipeline of the framework itself) and
prints what they returned; the tests hold that to our SDK's vectors (1e-5) and to our ``/v1/score``
answer (order and scores) on the ``families`` server. MiniLM has real weights, so retrieval must also
put the relevant document first.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import numpy as np
import pytest

from sie.sdk import SIEClient
from sie.sdk.encoding import multivector_embedding, sparse_embedding
from tests.e2e.conftest import (
    COLBERT,
    DOCS,
    MINILM,
    QUERY,
    RERANKER,
    SPLADE,
    Server,
)

# Each integration script may take up to 300 s on a small CI machine (``run_integration``'s limit).
pytestmark = pytest.mark.timeout(600)

RELEVANT = 1  # DOCS[1] answers QUERY
ATOL = 1e-5

LANGCHAIN = textwrap.dedent(
    """
    import asyncio, json, sys
    from langchain_core.documents import Document
    from langchain_core.vectorstores import InMemoryVectorStore
    from sie_langchain import SIEEmbeddings, SIEReranker, SIESparseEncoder

    c = json.loads(sys.argv[1])
    url, query, docs = c["url"], c["query"], c["docs"]
    out = {}
    embeddings = SIEEmbeddings(base_url=url, model=c["dense"])
    out["documents"] = embeddings.embed_documents(docs)
    out["query"] = embeddings.embed_query(query)

    def documents():
        return [Document(page_content=d, metadata={"index": i}) for i, d in enumerate(docs)]

    def ranked(found):
        return [[d.metadata["index"], d.metadata["relevance_score"]] for d in found]

    reranker = SIEReranker(base_url=url, model=c["reranker"])
    out["rerank"] = ranked(reranker.compress_documents(documents(), query))
    out["rerank_top2"] = ranked(
        SIEReranker(base_url=url, model=c["reranker"], top_k=2).compress_documents(documents(), query)
    )

    async def both():
        return await asyncio.gather(
            embeddings.aembed_documents(docs),
            embeddings.aembed_query(query),
            reranker.acompress_documents(documents(), query),
        )

    out["adocuments"], out["aquery"], arerank = asyncio.run(both())
    out["arerank"] = ranked(arerank)

    store = InMemoryVectorStore(embedding=embeddings)
    store.add_documents(documents())
    out["search"] = [[d.metadata["index"], s] for d, s in store.similarity_search_with_score(query, k=len(docs))]

    sparse = SIESparseEncoder(base_url=url, model=c["sparse"])
    out["sparse_queries"] = sparse.encode_queries([query])
    out["sparse_documents"] = sparse.encode_documents(docs)
    print(json.dumps(out))
    """
)

LLAMAINDEX = textwrap.dedent(
    """
    import asyncio, json, sys
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import NodeWithScore, TextNode
    from sie_llamaindex import SIEEmbedding, SIENodePostprocessor, SIESparseEmbeddingFunction

    c = json.loads(sys.argv[1])
    url, query, docs = c["url"], c["query"], c["docs"]
    out = {}
    embed = SIEEmbedding(base_url=url, model_name=c["dense"])
    out["documents"] = embed.get_text_embedding_batch(docs)
    out["document0"] = embed.get_text_embedding(docs[0])
    out["query"] = embed.get_query_embedding(query)
    out["aquery"] = asyncio.run(embed.aget_query_embedding(query))

    nodes = [TextNode(text=d, id_=str(i)) for i, d in enumerate(docs)]
    retriever = VectorStoreIndex(nodes, embed_model=embed).as_retriever(similarity_top_k=len(docs))
    retrieved = retriever.retrieve(query)
    out["search"] = [[int(n.node.node_id), n.score] for n in retrieved]

    def ranked(found):
        return [[int(n.node.node_id), n.score] for n in found]

    reranker = SIENodePostprocessor(base_url=url, model=c["reranker"])
    out["rerank"] = ranked(reranker.postprocess_nodes([NodeWithScore(node=n, score=0.0) for n in nodes], query_str=query))
    top2 = SIENodePostprocessor(base_url=url, model=c["reranker"], top_n=2)
    out["rerank_retrieved_top2"] = ranked(top2.postprocess_nodes(retrieved, query_str=query))

    sparse = SIESparseEmbeddingFunction(base_url=url, model_name=c["sparse"])
    out["sparse_queries"] = sparse.encode_queries([query])
    out["sparse_documents"] = sparse.encode_documents(docs)
    print(json.dumps(out))
    """
)

HAYSTACK = textwrap.dedent(
    """
    import json, sys
    from haystack import Document, Pipeline
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack_integrations.components.embedders.sie import (
        SIEDocumentEmbedder,
        SIEMultivectorDocumentEmbedder,
        SIEMultivectorTextEmbedder,
        SIESparseDocumentEmbedder,
        SIESparseTextEmbedder,
        SIETextEmbedder,
    )
    from haystack_integrations.components.rankers.sie import SIERanker

    c = json.loads(sys.argv[1])
    url, query, texts = c["url"], c["query"], c["docs"]
    out = {}

    def documents():
        return [Document(content=d, meta={"index": i, "title": f"title {i}"}) for i, d in enumerate(texts)]

    def ranked(found):
        return [[d.meta["index"], d.meta["score"]] for d in found]

    out["query"] = SIETextEmbedder(base_url=url, model=c["dense"]).run(text=query)["embedding"]
    embedded = SIEDocumentEmbedder(base_url=url, model=c["dense"]).run(documents=documents())["documents"]
    out["documents"] = [d.embedding for d in embedded]
    titled = SIEDocumentEmbedder(base_url=url, model=c["dense"], meta_fields_to_embed=["title"])
    out["titled"] = [d.embedding for d in titled.run(documents=documents())["documents"]]

    out["rank"] = ranked(SIERanker(base_url=url, model=c["reranker"]).run(query=query, documents=documents())["documents"])
    top2 = SIERanker(base_url=url, model=c["reranker"], top_k=2)
    out["rank_top2"] = ranked(top2.run(query=query, documents=documents())["documents"])

    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    store.write_documents(embedded)
    pipeline = Pipeline()
    pipeline.add_component("embed", SIETextEmbedder(base_url=url, model=c["dense"]))
    pipeline.add_component("retrieve", InMemoryEmbeddingRetriever(document_store=store, top_k=len(texts)))
    pipeline.add_component("rank", SIERanker(base_url=url, model=c["reranker"]))
    pipeline.connect("embed.embedding", "retrieve.query_embedding")
    pipeline.connect("retrieve.documents", "rank.documents")
    result = pipeline.run({"embed": {"text": query}, "rank": {"query": query}}, include_outputs_from={"retrieve"})
    out["search"] = [[d.meta["index"], d.score] for d in result["retrieve"]["documents"]]
    out["pipeline_rank"] = ranked(result["rank"]["documents"])

    out["sparse_query"] = SIESparseTextEmbedder(base_url=url, model=c["sparse"]).run(text=query)["sparse_embedding"]
    sparse_docs = SIESparseDocumentEmbedder(base_url=url, model=c["sparse"]).run(documents=documents())
    out["sparse_documents"] = [d.meta["_sparse_embedding"] for d in sparse_docs["documents"]]

    out["multivector_query"] = SIEMultivectorTextEmbedder(base_url=url, model=c["multivector"]).run(text=query)[
        "multivector_embedding"
    ]
    multi_docs = SIEMultivectorDocumentEmbedder(base_url=url, model=c["multivector"]).run(documents=documents())
    out["multivector_documents"] = [d.meta["_multivector_embedding"] for d in multi_docs["documents"]]
    print(json.dumps(out))
    """
)


def _config(server: Server) -> str:
    return json.dumps(
        {
            "url": server.url,
            "query": QUERY,
            "docs": DOCS,
            "dense": MINILM,
            "reranker": RERANKER,
            "sparse": SPLADE,
            "multivector": COLBERT,
        }
    )


@pytest.fixture(scope="module")
def langchain(run_integration: Any, families: Server) -> dict[str, Any]:
    return run_integration(LANGCHAIN, _config(families))


@pytest.fixture(scope="module")
def llamaindex(run_integration: Any, families: Server) -> dict[str, Any]:
    return run_integration(LLAMAINDEX, _config(families))


@pytest.fixture(scope="module")
def haystack(run_integration: Any, families: Server) -> dict[str, Any]:
    return run_integration(HAYSTACK, _config(families))


@pytest.fixture(scope="module")
def ours(families: Server) -> Any:
    with SIEClient(families.url, timeout_s=120) as client:
        yield client


# --- what our side says ------------------------------------------------------------------------------


def dense_documents(client: SIEClient, texts: list[str] = DOCS) -> np.ndarray:
    results = client.encode(MINILM, [{"text": t} for t in texts], output_types=["dense"])
    return np.stack([r["dense"] for r in results])


def dense_query(client: SIEClient) -> np.ndarray:
    vector: np.ndarray = client.encode(
        MINILM, {"text": QUERY}, output_types=["dense"], options={"is_query": True}
    )["dense"]
    return vector


def reference_ranking(server: Server, texts: list[str]) -> list[tuple[int, float]]:
    """Our ``/v1/score`` answer (JSON) for ``texts`` sent with their positions as ids: (position, score),
    best first."""
    body = {"query": {"text": QUERY}, "items": [{"text": t, "id": str(i)} for i, t in enumerate(texts)]}
    response = server.client.post(f"/v1/score/{RERANKER}", json=body, headers={"accept": "application/json"})
    assert response.status_code == 200, response.text
    scores = response.json()["scores"]
    assert [s["rank"] for s in scores] == list(range(len(texts)))
    return [(int(s["item_id"]), s["score"]) for s in scores]


def sparse_reference(client: SIEClient, texts: list[str], is_query: bool) -> list[dict[str, list[Any]]]:
    options = {"is_query": True} if is_query else None
    results = client.encode(SPLADE, [{"text": t} for t in texts], output_types=["sparse"], options=options)
    return [sparse_embedding(r) for r in results]


# --- what the integrations must match ------------------------------------------------------------------


def assert_vectors(got: Any, expected: np.ndarray) -> None:
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)


def assert_ranking(got: list[list[Any]], expected: list[tuple[int, float]]) -> None:
    """Same positions in the same order, same scores; the integration maps scores back by the ids it
    sent, so a wrong ``item_id`` echo would show up here as a 0.0 score."""
    assert [int(index) for index, _ in got] == [index for index, _ in expected]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=0, atol=ATOL)
    assert all(score != 0.0 for _, score in got)


def assert_sparse(got: list[Any], expected: list[dict[str, list[Any]]]) -> None:
    assert len(got) == len(expected)
    for vector, reference in zip(got, expected, strict=True):
        assert len(reference["indices"]) > 5
        assert vector["indices"] == reference["indices"]
        np.testing.assert_allclose(vector["values"], reference["values"], rtol=0, atol=ATOL)


def assert_search(got: list[list[Any]], query: np.ndarray, documents: np.ndarray) -> None:
    """A store's similarity search: cosine scores of our vectors, best first, the relevant one on top."""
    cosines = documents @ query / (np.linalg.norm(documents, axis=1) * np.linalg.norm(query))
    order = [int(i) for i in np.argsort(-cosines, kind="stable")]
    assert [int(index) for index, _ in got] == order
    assert order[0] == RELEVANT
    np.testing.assert_allclose([s for _, s in got], cosines[order], rtol=0, atol=ATOL)


# --- LangChain: SIEEmbeddings, SIEReranker, SIESparseEncoder -----------------------------------------


def test_langchain_embeddings_equal_our_sdk(langchain: dict[str, Any], ours: SIEClient) -> None:
    documents, query = dense_documents(ours), dense_query(ours)
    assert documents.shape == (len(DOCS), 384)
    assert_vectors(langchain["documents"], documents)
    assert_vectors(langchain["adocuments"], documents)
    assert_vectors(langchain["query"], query)
    assert_vectors(langchain["aquery"], query)
    assert_search(langchain["search"], query, documents)


def test_langchain_reranker_follows_our_score(langchain: dict[str, Any], families: Server) -> None:
    expected = reference_ranking(families, DOCS)
    assert_ranking(langchain["rerank"], expected)
    assert_ranking(langchain["arerank"], expected)
    assert_ranking(langchain["rerank_top2"], expected[:2])


def test_langchain_sparse_encoder_equals_our_splade(langchain: dict[str, Any], ours: SIEClient) -> None:
    assert_sparse(langchain["sparse_queries"], sparse_reference(ours, [QUERY], is_query=True))
    assert_sparse(langchain["sparse_documents"], sparse_reference(ours, DOCS, is_query=False))


# --- LlamaIndex: SIEEmbedding, SIENodePostprocessor, SIESparseEmbeddingFunction ----------------------


def test_llamaindex_embedding_equals_our_sdk(llamaindex: dict[str, Any], ours: SIEClient) -> None:
    documents, query = dense_documents(ours), dense_query(ours)
    assert_vectors(llamaindex["documents"], documents)
    assert_vectors(llamaindex["document0"], documents[0])
    assert_vectors(llamaindex["query"], query)
    assert_vectors(llamaindex["aquery"], query)
    assert_search(llamaindex["search"], query, documents)


def test_llamaindex_node_postprocessor_follows_our_score(
    llamaindex: dict[str, Any], families: Server
) -> None:
    assert_ranking(llamaindex["rerank"], reference_ranking(families, DOCS))
    # Reranking what the retriever returned: positions are in retrieval order.
    retrieved = [int(index) for index, _ in llamaindex["search"]]
    expected = [(retrieved[i], s) for i, s in reference_ranking(families, [DOCS[i] for i in retrieved])]
    assert_ranking(llamaindex["rerank_retrieved_top2"], expected[:2])


def test_llamaindex_sparse_function_equals_our_splade(llamaindex: dict[str, Any], ours: SIEClient) -> None:
    for key, texts, is_query in (("sparse_queries", [QUERY], True), ("sparse_documents", DOCS, False)):
        indices, values = llamaindex[key]
        got = [{"indices": i, "values": v} for i, v in zip(indices, values, strict=True)]
        assert_sparse(got, sparse_reference(ours, texts, is_query))


# --- Haystack: SIETextEmbedder, SIEDocumentEmbedder, SIERanker, sparse and multivector embedders -----


def test_haystack_embedders_equal_our_sdk(haystack: dict[str, Any], ours: SIEClient) -> None:
    documents, query = dense_documents(ours), dense_query(ours)
    assert_vectors(haystack["documents"], documents)
    assert_vectors(haystack["query"], query)
    # meta_fields_to_embed: the title goes in front of the content, separated by a space.
    titled = dense_documents(ours, [f"title {i} {d}" for i, d in enumerate(DOCS)])
    assert_vectors(haystack["titled"], titled)
    assert not np.allclose(titled, documents, atol=1e-3)


def test_haystack_ranker_and_pipeline_follow_our_score(
    haystack: dict[str, Any], families: Server, ours: SIEClient
) -> None:
    expected = reference_ranking(families, DOCS)
    assert_ranking(haystack["rank"], expected)
    assert_ranking(haystack["rank_top2"], expected[:2])
    # SIETextEmbedder -> InMemoryEmbeddingRetriever -> SIERanker.
    assert_search(haystack["search"], dense_query(ours), dense_documents(ours))
    retrieved = [int(index) for index, _ in haystack["search"]]
    in_retrieval_order = reference_ranking(families, [DOCS[i] for i in retrieved])
    assert_ranking(haystack["pipeline_rank"], [(retrieved[i], s) for i, s in in_retrieval_order])


def test_haystack_sparse_embedders_equal_our_splade(haystack: dict[str, Any], ours: SIEClient) -> None:
    assert_sparse([haystack["sparse_query"]], sparse_reference(ours, [QUERY], is_query=True))
    assert_sparse(haystack["sparse_documents"], sparse_reference(ours, DOCS, is_query=False))


def test_haystack_multivector_embedders_equal_our_colbert(haystack: dict[str, Any], ours: SIEClient) -> None:
    query = ours.encode(COLBERT, {"text": QUERY}, output_types=["multivector"], options={"is_query": True})
    documents = ours.encode(COLBERT, [{"text": d} for d in DOCS], output_types=["multivector"])
    assert np.asarray(haystack["multivector_query"]).shape == query["multivector"].shape == (16, 16)
    assert_vectors(haystack["multivector_query"], np.asarray(multivector_embedding(query["multivector"])))
    assert len(haystack["multivector_documents"]) == len(DOCS)
    for got, result in zip(haystack["multivector_documents"], documents, strict=True):
        assert_vectors(got, np.asarray(multivector_embedding(result["multivector"])))
