"""The chaos run's load client: the public ``sie-sdk`` (run with its own interpreter, not ours) sending
a steady mix of encode, score and extract requests of 1 and 32 items to two gateways, each request
retried on the other gateway when one fails (what a client of a two-gateway deployment does).

Two modes, one file (it imports nothing of ours, so the public SDK's venv can run it):
- ``expect PLAN OUT``: the answer of every request template from one server (the standalone one);
- ``load PLAN EXPECTED OUT``: threads send templates in turn until ``PLAN["stop_file"]`` exists or
  ``PLAN["duration_s"]`` passes; every request becomes one JSON line in OUT: when it started and
  ended, the gateways it tried, whether its one answer equals the expected one (and how not).
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sie_sdk import SIEClient  # type: ignore[import-not-found]
from sie_sdk.types import Item  # type: ignore[import-not-found]

RETRY_DEADLINE_S = 120.0
COSINE_MIN = 1 - 1e-5
SCORE_TOLERANCE = 1e-4


def answer(client: Any, template: dict[str, Any]) -> Any:
    """One template's answer in plain JSON: vectors, scores by document id, entities per text.

    ``wait_for_capacity=False``: the SDK's own retries would wait on the one gateway it knows (a dead
    one until it restarts); this client fails over to the other gateway instead."""
    kind, once = template["kind"], {"wait_for_capacity": False}
    if kind == "encode":
        results = client.encode(template["model"], [Item(text=t) for t in template["texts"]], **once)
        return [[float(v) for v in result["dense"]] for result in results]
    if kind == "score":
        docs = [Item(id=f"d{i}", text=t) for i, t in enumerate(template["docs"])]
        result = client.score(template["model"], Item(text=template["query"]), docs, **once)
        return {entry["item_id"]: float(entry["score"]) for entry in result["scores"]}
    results = client.extract(
        template["model"], [Item(text=t) for t in template["texts"]], labels=template["labels"], **once
    )
    return [
        sorted(
            [e["text"], e["label"], e.get("start"), e.get("end"), float(e["score"])]
            for e in result.get("entities", [])
        )
        for result in results
    ]


def mismatch(kind: str, got: Any, want: Any) -> str | None:
    """Why ``got`` is not ``want`` (None when it is, within float noise of another batch)."""
    if kind == "encode":
        if len(got) != len(want):
            return f"{len(got)} vectors for {len(want)}"
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            dot = sum(x * y for x, y in zip(a, b, strict=True))
            norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
            if norm == 0 or dot / norm < COSINE_MIN:
                return f"item {i}: cosine {dot / norm if norm else 0:.7f}"
        return None
    if kind == "score":
        if set(got) != set(want):
            return f"documents {sorted(got)} for {sorted(want)}"
        worst = max(abs(got[k] - want[k]) for k in want)
        return f"score off by {worst:.2e}" if worst > SCORE_TOLERANCE else None
    if len(got) != len(want):
        return f"{len(got)} items for {len(want)}"
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if [e[:4] for e in a] != [e[:4] for e in b]:
            return f"item {i}: entities {a} for {b}"
        if any(abs(x[4] - y[4]) > SCORE_TOLERANCE for x, y in zip(a, b, strict=True)):
            return f"item {i}: entity scores {a} for {b}"
    return None


def expect(plan: dict[str, Any], out: Path) -> None:
    with SIEClient(plan["expect_url"], timeout_s=120) as client:
        answers = [answer(client, template) for template in plan["templates"]]
    out.write_text(json.dumps(answers))


class Load:
    def __init__(self, plan: dict[str, Any], expected: list[Any], out: Path) -> None:
        self.plan, self.expected = plan, expected
        self.templates: list[dict[str, Any]] = plan["templates"]
        self.gateways: list[str] = plan["gateways"]
        self.stop_file = Path(plan["stop_file"])
        self.deadline = time.time() + float(plan["duration_s"])
        self.out = out.open("a", buffering=1)
        self.lock = threading.Lock()
        self.sent = 0

    def running(self) -> bool:
        return time.time() < self.deadline and not self.stop_file.exists()

    def next_number(self) -> int:
        with self.lock:
            self.sent += 1
            return self.sent - 1

    def thread(self, index: int) -> None:
        timeout = float(self.plan.get("timeout_s", 30))
        clients = [SIEClient(url, timeout_s=timeout) for url in self.gateways]
        pace = float(self.plan.get("pace_s", 0.0))
        try:
            while self.running():
                number = self.next_number()
                self.one(number, clients, first=(number + index) % len(clients))
                if pace:
                    time.sleep(pace)
        finally:
            for client in clients:
                client.close()

    def one(self, number: int, clients: list[Any], first: int) -> None:
        which = number % len(self.templates)
        template = self.templates[which]
        record: dict[str, Any] = {"n": number, "kind": template["kind"], "size": template["size"]}
        record["template"], record["start"], record["tried"] = which, time.time(), []
        errors: list[str] = []
        record["statuses"] = []  # of the failed attempts: None where no HTTP answer came
        attempt = 0
        while True:
            gateway = (first + attempt) % len(clients)
            record["tried"].append(gateway)
            try:
                got = answer(clients[gateway], template)
            except Exception as exc:  # what the SDK raised: the next attempt goes to the other gateway
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                record["statuses"].append(getattr(exc, "status_code", None))
                attempt += 1
                if time.time() - record["start"] > RETRY_DEADLINE_S:
                    record.update(ok=False, error=errors[-1])
                    break
                time.sleep(min(0.1 * attempt, 1.0))
                continue
            record["mismatch"] = mismatch(template["kind"], got, self.expected[which])
            record["ok"] = record["mismatch"] is None
            break
        record["end"], record["errors"] = time.time(), errors[-3:]
        self.out.write(json.dumps(record) + "\n")

    def run(self) -> None:
        threads = [
            threading.Thread(target=self.thread, args=(i,), daemon=True)
            for i in range(int(self.plan["concurrency"]))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.out.close()


def main(argv: list[str]) -> None:
    mode, plan = argv[1], json.loads(Path(argv[2]).read_text())
    if mode == "expect":
        expect(plan, Path(argv[3]))
    elif mode == "load":
        Load(plan, json.loads(Path(argv[3]).read_text()), Path(argv[4])).run()
    else:
        raise SystemExit(f"unknown mode {mode!r}: expect or load")


if __name__ == "__main__":
    main(sys.argv)
