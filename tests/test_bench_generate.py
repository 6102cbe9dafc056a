"""bench.generate in its smallest form (a 1-layer model, concurrency 1 and 2, a few tokens): the table
is consistent with what was sent. No timing is checked: only counts and that every cell ran."""

from __future__ import annotations

import json
from pathlib import Path

from bench import generate


def test_a_small_run_gives_every_cell_with_exact_token_counts(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    argv = ["--concurrency", "1,2", "--new-tokens", "4", "--rounds", "2", "--hidden", "64", "--layers", "1"]
    assert generate.main([*argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    cells = {(c["side"], c["concurrency"]): c for c in result["cells"]}
    assert set(cells) == {("raw", 1), ("raw", 2), ("ours", 1), ("ours", 2)}
    for (_, concurrency), cell in cells.items():
        # End-of-sequence is suppressed on both sides: every request makes exactly its tokens.
        assert cell["requests"] == 2 * concurrency
        assert cell["tokens"] == 4 * cell["requests"]
        assert cell["tokens_per_s"] > 0
    assert cells["ours", 1]["ttft_p50_ms"] > 0 and cells["raw", 1]["ttft_p50_ms"] > 0
    assert set(result["ratios"]) == {"ours/raw c=1", "ours/raw c=2", "ours c=2 / ours c=1"}
