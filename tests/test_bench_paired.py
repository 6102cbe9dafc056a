"""The paired-round arithmetic the benchmark's target ratios rest on."""

from __future__ import annotations

import pytest

from bench.paired import Round, median_ratio


def test_median_of_the_ratios_within_rounds_not_the_ratio_of_medians():
    rounds = [
        Round(raw={"float32": 50.0}, servers={"sie": 100.0, "infinity": 40.0}),
        Round(raw={"float32": 40.0}, servers={"sie": 60.0, "infinity": 30.0}),
        Round(raw={"float32": 45.0}, servers={"sie": 99.0, "infinity": 45.0}),
    ]
    assert median_ratio(rounds, "sie", "float32") == pytest.approx(2.0)  # 2.0, 1.5, 2.2
    assert median_ratio(rounds, "sie", "infinity") == pytest.approx(2.2)  # 2.5, 2.0, 2.2


def test_a_missing_side_gives_no_ratio():
    rounds = [Round(raw={"float32": 50.0}, servers={"sie": 100.0})]
    assert median_ratio(rounds, "sie", "infinity") is None
    assert median_ratio(rounds, "sie", "bfloat16-mixed") is None
    assert median_ratio([], "sie", "float32") is None


def test_a_compared_variant_of_our_server_gets_its_paired_ratio():
    from bench.cli import parse_args
    from bench.results import RunResult, ServerRun, compute_ratios

    args = parse_args(["--compare-env", "SIE_ALLOCATOR=system,MALLOC_ARENA_MAX=2", "--quick"])
    assert args.compare_env == [(("SIE_ALLOCATOR", "system"), ("MALLOC_ARENA_MAX", "2"))]
    args = parse_args(["--compare-env", "MALLOC_CONF=background_thread:true,dirty_decay_ms:1000,X=1"])
    assert args.compare_env == [(("MALLOC_CONF", "background_thread:true,dirty_decay_ms:1000"), ("X", "1"))]
    variant = "sie with SIE_ALLOCATOR=system"
    run = RunResult({}, {}, {}, raw={})
    run.servers = [ServerRun("sie", "sie float32", [], 1.0, 1.0), ServerRun(variant, "b", [], 1.0, 1.0)]
    run.rounds = [
        Round(raw={"float32": 50.0}, servers={"sie": 100.0, variant: 80.0}),
        Round(raw={"float32": 50.0}, servers={"sie": 90.0, variant: 100.0}),
        Round(raw={"float32": 50.0}, servers={"sie": 99.0, variant: 90.0}),
    ]
    ratios = {r.name: r.value for r in compute_ratios(run, "float32")}
    name = "ours sdk c=16 b=32 / ours with SIE_ALLOCATOR=system (same cell) (median of 3 paired rounds)"
    assert ratios[name] == pytest.approx(1.1)  # 1.25, 0.9, 1.1
