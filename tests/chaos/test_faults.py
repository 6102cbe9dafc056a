"""Each fault of the chaos run on its own, in its bounded form (seconds of hold, not minutes), under
the public SDK's steady mixed load through two gateways: every request answered once with the
standalone server's values, nothing left in the work stream, no dead letters. ``scripts/chaos``
runs them all in one long load (docs/cluster.md)."""

from __future__ import annotations

import asyncio

from chaos import faults
from chaos.faults import Fault
from chaos.report import Report
from chaos.run import Harness

HOLD_S = 6.0
BASELINE_S = 3.0
SETTLE_S = 6.0


def _run(harness: Harness, name: str, fault: Fault) -> Report:
    report = harness.run(name.replace(" ", "-"), [(name, fault)], HOLD_S, BASELINE_S, SETTLE_S)
    print(f"\n{report.table()}")
    assert not report.problems(), f"{report.problems()}\n{report.table()}"
    baseline, window = report.rows
    assert baseline.sent > 0 and window.sent > 0, report.table()
    return report


def test_sigkill_of_the_stream_leaders_nats_node_loses_nothing(harness: Harness) -> None:
    nats = harness.top.nats
    assert nats is not None
    before = asyncio.run(nats.leader(faults.WORK_STREAM))
    _run(harness, "nats stream leader SIGKILL", faults.nats_leader_killed)
    after = asyncio.run(nats.leader(faults.WORK_STREAM))
    assert after.name != before.name, "a new leader was elected while the old one was dead"
    streams = asyncio.run(nats.streams())
    assert all(replicas == 3 for _, replicas in streams.values()), streams


def test_a_worker_partitioned_for_20_s_loses_nothing(harness: Harness) -> None:
    _run(harness, "worker partitioned 20 s", faults.worker_partitioned)


def test_a_killed_gateways_clients_go_to_the_other(harness: Harness) -> None:
    report = _run(harness, "gateway SIGKILL", faults.gateway_killed)
    assert report.rows[1].retried > 0, f"no request met the dead gateway\n{report.table()}"


def test_loss_and_delay_on_the_worker_links_lose_nothing(harness: Harness) -> None:
    _run(harness, "5 % loss + 50 ms delay on worker links", faults.links_impaired)


def test_a_config_posted_while_sie_config_restarts_is_served_once(harness: Harness) -> None:
    _run(harness, "sie-config restarted mid-post", faults.config_restarted_mid_post)


def test_a_cpu_starved_worker_beside_a_fast_one_loses_nothing(harness: Harness) -> None:
    _run(harness, "slow (CPU-starved) worker", faults.worker_starved)


def test_a_full_weight_cache_disk_leaves_the_new_model_to_the_other_worker(harness: Harness) -> None:
    _run(harness, "weight-cache disk full", faults.weight_cache_full)
