"""The chaos run in its bounded form (seconds of hold, not minutes): every fault in turn under one
steady mixed load of the public SDK through two gateways, as ``scripts/chaos`` runs them, each test
reading its own fault's window: every request answered once with the standalone server's values, the
fault's own check kept; after the load, nothing left in the work streams and no dead letters.

One load for all seven, not one each: a load client's start, the calm it is measured against and
the drain after it cost as much as a fault's window, seven times over in the suite's budget."""

from __future__ import annotations

import asyncio

import pytest

from chaos import faults
from chaos.report import Report, Row
from chaos.run import Harness

HOLD_S = 6.0
BASELINE_S = 3.0
SETTLE_S = 4.0


@pytest.fixture(scope="module")
def report(harness: Harness) -> Report:
    done = harness.run("faults", list(faults.FAULTS.items()), HOLD_S, BASELINE_S, SETTLE_S)
    print(f"\n{done.table()}")
    return done


def _window(report: Report, fault: str) -> Row:
    """The fault's window, checked: it ran, and has none of ``Row.problems`` (its own check held,
    every request in it answered once and correctly, no attempt answered 500 or 4xx)."""
    (row,) = [row for row in report.rows if row.fault == fault]
    assert row.sent > 0, report.table()
    assert not row.problems(), f"{row.problems()}\n{report.table()}"
    return row


def test_the_calm_before_the_faults_answers_everything(report: Report) -> None:
    _window(report, "baseline")


def test_sigkill_of_the_stream_leaders_nats_node_loses_nothing(harness: Harness, report: Report) -> None:
    """The fault's own check is that another node took the lead while the killed one was down."""
    _window(report, "nats stream leader SIGKILL")
    nats = harness.top.nats
    assert nats is not None
    streams = asyncio.run(nats.streams())
    assert all(replicas == 3 for _, replicas in streams.values()), streams


def test_a_worker_partitioned_for_20_s_loses_nothing(report: Report) -> None:
    _window(report, "worker partitioned 20 s")


def test_a_killed_gateways_clients_go_to_the_other(report: Report) -> None:
    row = _window(report, "gateway SIGKILL")
    assert row.retried > 0, f"no request met the dead gateway\n{report.table()}"


def test_loss_and_delay_on_the_worker_links_lose_nothing(report: Report) -> None:
    _window(report, "5 % loss + 50 ms delay on worker links")


def test_a_config_posted_while_sie_config_restarts_is_served_once(report: Report) -> None:
    _window(report, "sie-config restarted mid-post")


def test_a_cpu_starved_worker_beside_a_fast_one_loses_nothing(report: Report) -> None:
    _window(report, "slow (CPU-starved) worker")


def test_a_full_weight_cache_disk_leaves_the_new_model_to_the_other_worker(report: Report) -> None:
    _window(report, "weight-cache disk full")


def test_nothing_is_left_in_the_streams_and_nothing_dead_lettered(report: Report) -> None:
    assert not report.leftover_problems(), f"{report.leftover_problems()}\n{report.leftovers}"
