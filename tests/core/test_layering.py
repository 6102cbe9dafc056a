"""sie.core sits below every other layer: importing it pulls in no torch and nothing else of ours."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import sie.core.cuts, sie.core.heap, sie.core.options
ours = sorted(m for m in sys.modules if m.startswith("sie.") and not m.startswith("sie.core"))
print("torch" in sys.modules, ours)
"""


def test_core_imports_no_torch_and_no_other_layer():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False []"
