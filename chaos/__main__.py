"""``python -m chaos`` (``scripts/chaos``): the long chaos run. Builds the multi-host topology, puts
the public SDK's steady load on it and injects every fault in turn, round after round, for
``--minutes``; then prints the per-fault table, the RSS of every process and what the streams still
hold, writes them to ``<root>/report.md``, and exits 1 when the invariant broke anywhere."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from chaos import hosts
from chaos.faults import FAULTS
from chaos.run import Harness
from chaos.topology import topology

REPO = Path(__file__).resolve().parents[1]


def public_python() -> Path:
    """The public SDK's interpreter: ``$SIE_PUBLIC_VENV`` or ``.venv-public``, built from the lock
    when missing (the tests' builder: one way to make it)."""
    sys.path.insert(0, str(REPO))
    from tests.conftest import public_venv

    return public_venv(Path(os.environ.get("SIE_PUBLIC_VENV", REPO / ".venv-public")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the load runs (default 10)")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds each fault stays (default 20)")
    parser.add_argument("--settle", type=float, default=15.0, help="calm seconds after each (default 15)")
    parser.add_argument("--baseline", type=float, default=15.0, help="calm seconds before the first")
    parser.add_argument("--workers", type=int, default=2, help="worker hosts (default 2)")
    parser.add_argument("--concurrency", type=int, default=3, help="the load client's threads (default 3)")
    parser.add_argument("--fault", action="append", choices=sorted(FAULTS), help="only these (repeatable)")
    parser.add_argument(
        "--root", type=Path, help="folder for logs, stores and the report (default: a new temp)"
    )
    args = parser.parse_args(argv)
    why = hosts.available()
    if why is not None:
        print(f"scripts/chaos: {why}", file=sys.stderr)
        return 2
    root = args.root or Path(tempfile.mkdtemp(prefix="sie-chaos-"))
    chosen = [(name, FAULTS[name]) for name in (args.fault or list(FAULTS))]
    print(f"chaos run in {root}: {len(chosen)} faults for {args.minutes:g} min", flush=True)
    with topology(root, args.workers) as top:
        harness = Harness(top, public_python(), concurrency=args.concurrency)
        harness.expect()
        with harness.sampling_rss():
            report = harness.run("long", chosen, args.hold, args.baseline, args.settle, args.minutes)
    problems = report.problems() + report.rss_growth(min_span_s=min(300.0, 30 * args.minutes))
    text = "\n\n".join(
        [
            report.table(),
            report.rss_table(),
            f"streams after the run: {report.leftovers}",
            "invariant kept" if not problems else "INVARIANT BROKEN:\n" + "\n".join(problems),
        ]
    )
    (root / "report.md").write_text(text + "\n")
    print(text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
