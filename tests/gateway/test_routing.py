"""Routing on the worker table, without a network: lanes from heartbeats, headers, configured
machine profiles, scale-from-zero demand, and workers forgotten when silent or terminated."""

from __future__ import annotations

import pytest

from sie.gateway.routing import Demand, GpuNotConfigured, Lane, Provisioning, Router
from sie.gateway.workers import WorkerTable
from sie.queue.contract import Heartbeat


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def beat(
    name: str, pool: str = "default", profile: str = "default", bundle: str = "default", **kw: object
) -> Heartbeat:
    fields: dict[str, object] = {"ready": True, **kw}
    return Heartbeat(
        name=name,
        machine_profile=profile,
        pool_name=pool,
        bundle=bundle,
        timestamp=0.0,
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _router(clock: Clock, configured: list[str] | None = None) -> tuple[Router, WorkerTable, Demand]:
    workers = WorkerTable(stale_after_s=15, clock=clock)
    demand = Demand(clock=clock)
    return Router(workers, demand, configured or []), workers, demand


def test_an_unconfigured_request_takes_a_workers_lane(clock: Clock) -> None:
    router, workers, _ = _router(clock)
    workers.update(beat("w1"))
    assert router.route("default", None, None) == Lane("default", "default", "default")
    workers.update(beat("w2", pool="eval", profile="l4", bundle="gpu"))
    assert router.route("gpu", None, None) == Lane("eval", "l4", "gpu")


def test_headers_pick_the_pool_and_profile(clock: Clock) -> None:
    router, workers, _ = _router(clock)
    workers.update(beat("a", pool="default", profile="l4"))
    workers.update(beat("b", pool="eval", profile="a100"))
    assert router.route("default", "L4", None) == Lane("default", "l4", "default")
    assert router.route("default", "eval/a100", None) == Lane("eval", "a100", "default")
    assert router.route("default", None, "eval") == Lane("eval", "a100", "default")
    with pytest.raises(Provisioning) as refused:
        router.route("default", "eval/l4", None)  # the pool has no l4 worker
    assert (refused.value.pool, refused.value.profile) == ("eval", "l4")


def test_configured_profiles_are_canonical_and_others_refused(clock: Clock) -> None:
    router, workers, _ = _router(clock, ["L4", "a100-80gb-spot"])
    workers.update(beat("a", profile="L4"))
    assert router.route("default", "l4", None).machine_profile == "L4"
    with pytest.raises(Provisioning):
        router.route("default", "a100-80gb", None)  # found as a100-80gb-spot, but no worker runs it
    with pytest.raises(GpuNotConfigured) as refused:
        router.route("default", "t4", None)
    assert refused.value.configured == ["L4", "a100-80gb-spot"]


def test_demand_rises_on_provisioning_and_falls_when_served_or_stale(clock: Clock) -> None:
    router, workers, demand = _router(clock, ["l4"])
    with pytest.raises(Provisioning):
        router.route("default", "l4", None)
    with pytest.raises(Provisioning):
        router.route("gpu", None, "eval")
    assert demand.pending(workers) == {("", "l4", "default"): 1.0, ("eval", "", "gpu"): 1.0}
    workers.update(beat("w", profile="l4"))
    assert demand.pending(workers) == {("eval", "", "gpu"): 1.0}  # served now
    clock.now += 121
    assert demand.pending(workers) == {}  # nobody asked for two minutes


def test_silent_and_terminated_workers_are_forgotten(clock: Clock) -> None:
    router, workers, _ = _router(clock)
    workers.update(beat("w1"))
    workers.update(beat("w2"))
    workers.update(beat("w2", terminated=True))
    assert [w.name for w in workers.all()] == ["w1"]
    clock.now += 16
    assert workers.all() == []
    with pytest.raises(Provisioning):
        router.route("default", None, None)
    workers.update(beat("w3", ready=False))
    assert workers.all() and workers.healthy() == []  # known, not routed to


def test_a_model_goes_to_the_first_bundle_by_priority_that_serves_it() -> None:
    from sie.catalog.bundles import Bundle
    from sie.catalog.catalog import Catalog
    from sie.gateway.routing import bundle_for, by_priority
    from sie.settings.common import PACKAGED_MODELS_DIR

    entry = Catalog.from_directory(PACKAGED_MODELS_DIR)["sentence-transformers/all-MiniLM-L6-v2"]
    module = entry.profile.adapter_path.partition(":")[0]
    serving = [Bundle("zeta", frozenset({module}), 5), Bundle("alpha", frozenset({module}), 5)]
    bundles = by_priority([Bundle("gpu", frozenset({module}), 90), *serving, Bundle("other", frozenset(), 1)])
    assert [b.name for b in bundles] == ["other", "alpha", "zeta", "gpu"]
    assert bundle_for(entry, bundles) == "alpha"
    assert bundle_for(entry, [Bundle("other", frozenset(), 1)]) == "default"


def test_demand_keys_are_the_operators_labels_only(clock: Clock) -> None:
    """A profile nobody configured or announced, and a pool nobody leased, are demand under
    ``other``: a caller's headers never become new keys (nor ``sie_gateway_pending_demand`` series)."""
    router, workers, demand = _router(clock)
    for n in range(50):
        with pytest.raises(Provisioning):
            router.route("default", f"pool-{n}/profile-{n}", None, pool_known=False)
    assert demand.pending(workers) == {("other", "other", "default"): 1.0}
    workers.update(beat("w", profile="t4", ready=False))  # announced, though not ready yet
    with pytest.raises(Provisioning):
        router.route("default", "t4", None)
    assert ("", "t4", "default") in demand.pending(workers)
