"""The gateway loads no model code: its image needs no torch, and it starts in a moment."""

from __future__ import annotations

import subprocess
import sys


def test_the_gateway_imports_no_model_stack() -> None:
    probe = (
        "import sys, sie.gateway.app, sie.gateway.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'onnxruntime', 'gliner'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
