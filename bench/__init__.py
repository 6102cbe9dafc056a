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

With ``--device cuda`` (``cpu`` for a dry run) the GPU benchmark runs instead:

- ``gpu_options``: its flags; ``gpu``: the order of its run; ``gpu_cells``: what a server is measured
  with; ``gpu_results``: its numbers and targets; ``gpu_report``: its summary and JSON.
- ``random_models``: seeded random-weight BERT shapes and their model YAMLs.
- ``loadgen`` (over ``http1``): many small requests from several processes.
- ``flops``: tokens/s as a fraction of the GPU's peak; ``gpu_memory``: what the server holds on the GPU.

The cluster (``scripts/bench-cluster``): ``cluster`` puts the standalone server and a one-worker
cluster side by side; ``scaleout`` (``--scale-out 1,2,4``) grows the workers behind one gateway on a
tiny model and names what stops the growth; ``stacks`` sums py-spy's samples of a process.
"""
