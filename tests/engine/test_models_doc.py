"""docs/models.md tells the truth: one row per shipped id, served or not as the registry decides, the
class (or refused adapter) its default profile names, and a test file that exists."""

from __future__ import annotations

import re

from sie.catalog.families import canonical, not_served
from sie.catalog.model_config import load_model_dir
from tests.conftest import MODELS_DIR, REPO

ROW = re.compile(r"^\| `([^`]+)` \| (yes|no \(ours\)) \| (served|not served) \| (.+) \| `([^`]+)`")


def test_every_shipped_id_has_one_true_row() -> None:
    rows = {}
    for line in (REPO / "docs" / "models.md").read_text().splitlines():
        match = ROW.match(line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} has two rows"
            rows[match.group(1)] = match.groups()[1:]
    configs = {config.sie_id: config for _, config in load_model_dir(MODELS_DIR)}
    assert set(rows) == set(configs)
    assert sum(public == "yes" for public, *_ in rows.values()) == 213
    for sie_id, (_, status, runs_on, test) in rows.items():
        path = configs[sie_id].resolve_profile("default").adapter_path
        family = not_served(path)
        assert status == ("served" if family is None else "not served"), sie_id
        assert (f"`{canonical(path)}`" if family is None else f"{family} (`{path}`)") == runs_on, sie_id
        assert (REPO / test).is_file(), test
