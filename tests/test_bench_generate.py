"""bench.generate in its smallest form (a 1-layer model, concurrency 1 and 2, 4 new tokens, three
requests a cell: at c = 2 one client sends two, and the raw side's last batch holds one prompt): the JSON and the table are consistent with what was sent. No timing is checked:
only counts, that every cell ran and that every ratio is a positive number."""

from __future__ import annotations

import json
from pathlib import Path

from bench import generate


def test_a_small_run_gives_every_cell_with_exact_token_counts(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    argv = ["--concurrency", "1,2", "--max-new-tokens", "4", "--requests", "3", "--hidden", "64"]
    argv += ["--layers", "1", "--log-dir", str(tmp_path / "run"), "--json", str(out)]
    assert generate.main(argv) == 0
    result = json.loads(out.read_text())
    cells = {(c["side"], c["concurrency"]): c for c in result["cells"]}
    assert set(cells) == {("raw", 1), ("raw", 2), ("ours", 1), ("ours", 2)}
    for (side, _), cell in cells.items():
        # End-of-sequence is suppressed on both sides: every request makes exactly its tokens.
        assert cell["requests"] == 3
        assert cell["tokens"] == 4 * cell["requests"]
        assert cell["tokens_per_s"] > 0 and cell["request_tokens_per_s_p50"] > 0
        assert 0 < cell["ttft_p50_ms"] <= cell["ttft_p95_ms"]
        if side == "ours":
            assert 0 <= cell["greedy_match"] <= cell["requests"] and cell["server_cores"] > 0
    assert set(result["ratios"]) == {
        "ours/raw c=1",
        "ours/raw c=2",
        "ours c=2 / ours c=1",
        "raw c=2 / raw c=1",
    }
    assert all(value > 0 for value in result["ratios"].values())
    assert result["config"]["levels"] == [1, 2] and result["machine"]["cores"] >= 1
