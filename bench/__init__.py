"""Benchmark harness: raw sentence-transformers limit vs our server vs Infinity, on one seeded corpus.

Run it with ``scripts/bench`` (see docs/benchmarks.md). Modules, one job each:

- ``corpus``: the seeded corpus, the 10-word query set and the labelled retrieval set.
- ``raw``: sentence-transformers ``encode`` throughput and single-query latency, plus reference vectors.
- ``procs``: starting, probing (CPU time, RSS) and stopping server processes.
- ``servers``: how to start our server and Infinity; ``infinity_env`` installs Infinity's venv.
- ``clients``: the request senders (our SDK over msgpack, OpenAI-style JSON).
- ``load``: the closed-loop asyncio load generator; ``stats`` its numbers.
- ``correctness``: the cosine and retrieval gates; ``report``: tables, ratios, summary, JSON.
- ``cli``: flags and the order of the run.
"""
