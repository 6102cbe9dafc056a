"""``python -m bench``: the benchmark run (see docs/benchmarks.md)."""

import sys

from bench.cli import main

sys.exit(main())
