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


def test_checking_a_request_with_options_imports_no_model_stack() -> None:
    """The gateway checks each request's options against the family's: declared beside the adapter
    names, so a request naming an option does not import the family's module (torch, 10 s on 2 cores,
    while the gateway's loop stands still)."""
    probe = (
        "import sys\n"
        "from sie.catalog.admission import Admission, RequestLimits\n"
        "from sie.catalog.catalog import Catalog\n"
        "from sie.catalog.admit import admit_encode, admit_extract\n"
        "from sie.settings.common import PACKAGED_MODELS_DIR\n"
        "from sie.wire.requests import EncodeParams, EncodeRequest, ExtractParams, ExtractRequest, Item\n"
        "admission = Admission(Catalog.from_directory(PACKAGED_MODELS_DIR), RequestLimits(1 << 20))\n"
        "admit_encode(admission, 'sentence-transformers/all-MiniLM-L6-v2', EncodeRequest(items=[Item(text='x')], "
        "params=EncodeParams(options={'normalize': False})))\n"
        "admit_extract(admission, 'urchade/gliner_multi-v2.1', ExtractRequest(items=[Item(text='x')], "
        "params=ExtractParams(labels=['person'], options={'threshold': 0.3})))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'onnxruntime', 'gliner'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
