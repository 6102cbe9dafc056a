"""The host path through the cluster: what a gateway, NATS and one queue worker spend around a model
that costs next to nothing (``python -m bench.host_path --gateway``).

The same cells as the standalone server's (bench/host_path.py): 32-item requests at a few
connections and lone 1-item requests one at a time, on each wire the gateway serves, against one
``nats-server`` (JetStream), one ``sie-gateway`` and one queue worker serving the near-free model,
started as bench/scaleout.py starts them. Each process's CPU per request is read from /proc, so the
table shows the gateway's own cost beside the worker's and NATS's. The gateway serves ``/v1/encode``
only (no ``/v1/embeddings``): an ``openai`` wire is left out here.

``--profile S`` (``python -m bench.host_path_cluster``) samples the gateway (``--profiled
gateway,worker``: the worker too) with py-spy (bench/stacks.py, ``--gil``) for ``S`` seconds under
each load and prints where its CPU goes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

from bench import corpus, procs, random_models, stacks
from bench.cluster import serves, start_gateway
from bench.host_path import Cell, _cells, _print_cell, run_cell
from bench.scaleout import Cluster

GATEWAY_WIRES: Final = ("msgpack", "json")  # the gateway has no /v1/embeddings
TARGET: Final = "gateway"


def start_cluster(built: random_models.BuiltModel, log_dir: Path, worker_env: dict[str, str]) -> Cluster:
    """NATS, one queue worker serving ``built`` and a gateway that sees it healthy."""
    cluster = Cluster(built.model_id, built.yaml_path.parent, log_dir, worker_env)
    try:
        cluster.grow(1)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _cores() -> int:
    """The cores a cluster's processes share: none is pinned, they have the whole machine."""
    return len(os.sched_getaffinity(0))


def pids_of(cluster: Cluster) -> dict[str, int]:
    return {"gateway": cluster.gateway_pid, "worker": cluster.workers[0].pid, "nats": cluster.nats.pid}


def gateway_cells(
    built: random_models.BuiltModel,
    texts: Sequence[str],
    queries: Sequence[str],
    args: argparse.Namespace,
    log_dir: Path,
) -> list[Cell]:
    """The host path's cells through a gateway and one queue worker; the load generator shares the
    machine's cores with them (a cluster has three processes to place: none is pinned)."""
    wires = [w for w in args.wires if w in GATEWAY_WIRES]
    env = dict(item.split("=", 1) for item in getattr(args, "worker_env", None) or [])
    cluster = start_cluster(built, log_dir, env)
    done: list[Cell] = []
    try:
        pids = pids_of(cluster)
        for cell in _cells(TARGET, wires, args.batch_requests, args.lone_requests, _cores()):
            pool = texts if cell.per_request > 1 else queries
            done.append(run_cell(cluster.url, pids, cell, pool, built.model_id, None))
            _print_cell(done[-1])
    finally:
        cluster.stop()
    return done


def profile(
    cluster: Cluster,
    cell: Cell,
    texts: Sequence[str],
    model: str,
    seconds: float,
    out_dir: Path,
    names: Sequence[str] = ("gateway",),
) -> dict[str, list[str]]:
    """py-spy (``--gil``) on each named process (``gateway``, ``worker``, ``nats`` is not Python) for
    ``seconds`` while ``cell``'s load runs past it; each summary's lines by name."""
    executable = stacks.py_spy()
    if executable is None:
        return {name: ["(py-spy not found: `pip install py-spy` to profile)"] for name in names}
    pids = pids_of(cluster)
    outs = {name: out_dir / f"{name}-{cell.wire}-{cell.per_request}.txt" for name in names}
    recorders = [stacks.record(executable, pids[name], seconds, out) for name, out in outs.items()]
    try:
        run_cell(cluster.url, pids, cell, texts, model, None)
    finally:
        for recorder in recorders:
            recorder.wait(timeout=seconds + 60)
    summaries: dict[str, list[str]] = {}
    for name, out in outs.items():
        if not out.exists():
            summaries[name] = [f"(py-spy wrote nothing; its log: {out.with_suffix('.log')})"]
            continue
        summaries[name] = stacks.summarize(stacks.parse(out.read_text(errors="replace"))).lines()
    return summaries


def before_gateway(cluster: Cluster, tree: Path, log_dir: Path) -> tuple[str, str, dict[str, int]]:
    """A gateway run from ``tree``'s ``src`` (an earlier commit's checkout) beside the cluster's own:
    gateways share nothing, so both serve the same worker through the same NATS."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {"SIE_MODELS_DIR": str(cluster.models_dir), "PYTHONPATH": str(tree.resolve() / "src")}
    gateway, url = start_gateway(cluster.nats_url, log_dir, serves(cluster.model), env)
    pids = {"gateway": gateway.pid, "worker": cluster.workers[0].pid, "nats": cluster.nats.pid}
    return "before: gateway", url, pids


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.host_path_cluster", description=__doc__)
    p.add_argument("--wires", type=lambda s: s.split(","), default=list(GATEWAY_WIRES))
    p.add_argument("--batch-requests", type=int, default=300, help="32-item requests per cell")
    p.add_argument("--lone-requests", type=int, default=600, help="1-item requests per cell")
    p.add_argument("--rounds", type=int, default=1, help="the cells this many times over")
    p.add_argument("--profile", type=float, default=0.0, metavar="S", help="py-spy the gateway S s per load")
    p.add_argument(
        "--profiled",
        type=lambda s: s.split(","),
        default=["gateway"],
        help="gateway,worker: whom --profile samples",
    )
    p.add_argument("--worker-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--before",
        type=Path,
        default=None,
        metavar="TREE",
        help="a second gateway from this source tree (an earlier commit's) on the same NATS and worker, "
        "measured in turn with ours in every round",
    )
    p.add_argument("--log-dir", type=Path, default=None)
    args = p.parse_args(argv)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="sie-host-path-cluster-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    folder = corpus.default_model_folder()
    [built] = random_models.build([random_models.TINY], folder, log_dir / "models")
    texts = corpus.build_corpus(folder, size=512).texts
    queries = corpus.build_corpus(folder, queries=64, size=64).queries
    env = dict(item.split("=", 1) for item in args.worker_env)
    wires = [w for w in args.wires if w in GATEWAY_WIRES]
    cluster = start_cluster(built, log_dir, env)
    try:
        gateways = [(TARGET, cluster.url, pids_of(cluster))]
        if args.before is not None:
            gateways.insert(0, before_gateway(cluster, args.before, log_dir / "before"))
        for round_ in range(args.rounds):
            for cell in _cells(TARGET, wires, args.batch_requests, args.lone_requests, _cores()):
                pool = texts if cell.per_request > 1 else queries
                turn = gateways if round_ % 2 == 0 else gateways[::-1]  # drift hits both alike
                for target, url, pids in turn:
                    mine = replace(cell, target=target)
                    _print_cell(run_cell(url, pids, mine, pool, built.model_id, None))
        if args.profile > 0:
            for cell in _cells(TARGET, wires[:1], args.batch_requests * 4, args.lone_requests * 4, _cores()):
                pool = texts if cell.per_request > 1 else queries
                found = profile(cluster, cell, pool, built.model_id, args.profile, log_dir, args.profiled)
                for name, lines in found.items():
                    print(f"\n**{name} profile (py-spy --gil), {cell.per_request}-item requests**\n")
                    print("\n".join(lines), flush=True)
    finally:
        cluster.stop()
        procs.stop_all()
    print(f"logs in {log_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
