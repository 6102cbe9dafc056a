"""bench.host_path in its smallest form (the near-free model, a real server pinned to one core, a few
requests a cell) gives a consistent table; its pure parts alone. No timing is checked: only that the
numbers agree with each other and with what was sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from bench import corpus, host_path, random_models
from bench.host_path import Bodies, Cell, median_cell, route_of
from bench.instructions import thread_times


def test_bodies_carry_the_texts_round_robin_in_each_wire() -> None:
    texts = ("a", "b", "c")
    packed = msgpack.unpackb(Bodies(texts, 2, "msgpack")(1))
    assert packed == {"items": [{"text": "c"}, {"text": "a"}]}
    assert json.loads(Bodies(texts, 2, "json")(0)) == {"items": [{"text": "a"}, {"text": "b"}]}
    assert json.loads(Bodies(texts, 1, "openai", "m")(4)) == {"model": "m", "input": ["b"]}
    assert route_of("openai", "bench/tiny") == "/v1/embeddings"
    assert route_of("msgpack", "bench/tiny") == "/v1/encode/bench/tiny"


def test_a_cells_rounds_give_their_medians() -> None:
    rounds = [
        Cell(
            "server 1 core",
            "json",
            32,
            4,
            10,
            items_per_s=v,
            cpu_per_item_s=v / 10,
            p50_s=v,
            p90_s=v,
            cpu_by_process={"server": v},
            failed=f,
        )
        for v, f in ((1.0, 0), (3.0, 1), (2.0, 0))
    ]
    cell = median_cell(rounds)
    assert (cell.items_per_s, cell.cpu_per_item_s, cell.p50_s, cell.cpu_by_process) == (
        2.0,
        0.2,
        2.0,
        {"server": 2.0},
    )
    assert cell.failed == 1 and cell.target == "server 1 core"


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="pins the server to one core, the load to another"
)
def test_a_smallest_run_measures_the_floor_and_the_server(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    lines: list[str] = []
    argv = ["--cores", "1", "--wires", "msgpack,openai", "--rounds", "1", "--batch-requests", "6"]
    argv += ["--lone-requests", "20", "--log-dir", str(tmp_path / "logs"), "--json", str(out), "--lean"]
    assert host_path.main(argv, write=lines.append) == 0
    result = json.loads(out.read_text())
    floor = result["floor"]
    assert 0 < floor["tokenize_item_s"] < floor["batch_item_s"] <= floor["packed_item_s"]
    assert floor["lone_s"] == min(floor["packed_lone_s"], floor["padded_lone_s"])
    cells = result["cells"]
    assert [(c["target"], c["wire"], c["per_request"]) for c in cells] == [
        ("server 1 core", "msgpack", 32),
        ("lean ASGI 1 core", "msgpack", 32),  # the yardstick speaks msgpack only
        ("server 1 core", "msgpack", 1),
        ("lean ASGI 1 core", "msgpack", 1),
        ("server 1 core", "openai", 32),
        ("server 1 core", "openai", 1),
    ]
    for cell in cells:
        assert cell["failed"] == 0
        assert cell["items_per_s"] > 0 and cell["p50_s"] <= cell["p90_s"]
        # per item x items per request is per request, and the server is the only process read
        assert cell["cpu_per_item_s"] * cell["per_request"] == pytest.approx(cell["cpu_per_request_s"])
        assert cell["cpu_by_process"]["server"] == pytest.approx(cell["cpu_per_request_s"])
    table = "\n".join(lines)
    assert "| server 1 core | openai | 1 x 1 |" in table and "Floor (in process, one thread)" in table
    assert result["floors_measured"] == 2  # before the first cells, and before the one round


def test_the_instruction_counts_drive_each_target_to_answers(tmp_path: Path) -> None:
    """``bench.instructions``' child without valgrind (``--plain``) for each target at once: the
    app's lifespan and the counted requests, each of which must be answered 200 (the drive raises
    otherwise)."""
    built = random_models.build([random_models.TINY], corpus.default_model_folder(), tmp_path)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")} | {"HF_HUB_OFFLINE": "1"}
    paths = [str(built.folder), str(built.yaml_path.parent)]
    children = {
        target: subprocess.Popen(
            [sys.executable, "-m", "bench.instructions", "--child", target, *paths, "5", "--plain"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for target in ("floor", "sie", "lean")
    }
    for target, child in children.items():
        output, _ = child.communicate(timeout=300)
        assert child.returncode == 0, (target, output.decode()[-2000:])


def test_the_thread_times_read_each_threads_cpu_around_the_load(tmp_path: Path) -> None:
    """``bench.instructions --threads``: our app in process, its event loop's CPU and the other
    threads' (the device thread runs every forward) per lone request, from /proc."""
    built = random_models.build([random_models.TINY], corpus.default_model_folder(), tmp_path)[0]
    times = thread_times("ours", None, built, 400)
    assert set(times) == {"loop_us", "other_threads_us"}
    assert times["loop_us"] > 0 and times["other_threads_us"] > 0  # the forward is not on the loop
    assert all(value < 100_000 for value in times.values())  # per request, not per run
