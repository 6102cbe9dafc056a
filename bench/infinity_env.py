"""Infinity's own venv, ``.venv-infinity`` in the repo root (gitignored by ``.venv-*/``), built once.

The wanted spec is ``torch==2.13.0 "infinity-emb[server,torch]==0.0.78"``; infinity-emb pins
``numpy<2``, which pip resolves to numpy 1.26 inside this separate venv (it never touches ``.venv``).
If that exact spec cannot install, the closest alternatives are tried in order and the one that
worked is printed and written to ``.venv-infinity/.bench-installed``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SPEC_ATTEMPTS: tuple[tuple[str, ...], ...] = (
    ("torch==2.13.0", "infinity-emb[server,torch]==0.0.78"),
    ("torch==2.13.0", "numpy<2", "infinity-emb[server,torch]==0.0.78"),
    ("torch==2.13.0", "infinity-emb[server]==0.0.78", "sentence-transformers", "numpy<2"),
    ("torch==2.13.0", "infinity-emb[server,torch]"),
)
PINNED = ("torch", "infinity-emb", "numpy", "sentence-transformers", "transformers", "optimum")


def venv_dir(repo_root: Path) -> Path:
    return repo_root / ".venv-infinity"


def _run(argv: list[str]) -> bool:
    print("  $ " + " ".join(argv), flush=True)
    return subprocess.run(argv, check=False).returncode == 0


def _works(venv: Path) -> bool:
    cli = venv / "bin" / "infinity_emb"
    if not cli.exists():
        return False
    check = subprocess.run(
        [str(cli), "v2", "--help"],
        capture_output=True,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"},
    )
    return check.returncode == 0


def _versions(venv: Path) -> str:
    freeze = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    keep = [line for line in freeze if line.split("==")[0].lower() in PINNED]
    return ", ".join(keep)


def ensure(repo_root: Path) -> tuple[Path, str]:
    """The infinity_emb executable and a line saying how it was installed (installing on first use)."""
    venv = venv_dir(repo_root)
    stamp = venv / ".bench-installed"
    cli = venv / "bin" / "infinity_emb"
    if stamp.exists() and _works(venv):
        return cli, stamp.read_text().strip()
    print(f"installing Infinity into {venv} (once; several minutes)", flush=True)
    python = venv / "bin" / "python"
    if not python.exists() and not _run([sys.executable, "-m", "venv", str(venv)]):
        raise RuntimeError(f"could not create {venv}")
    _run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    for attempt, spec in enumerate(SPEC_ATTEMPTS):
        if _run([str(python), "-m", "pip", "install", "-q", *spec]) and _works(venv):
            how = "pip install " + " ".join(f'"{s}"' if "[" in s or "<" in s else s for s in spec)
            if attempt:
                how += f" (fallback {attempt}: the exact spec did not install)"
            how += f"; resolved: {_versions(venv)}"
            stamp.write_text(how + "\n")
            print("  Infinity installed: " + how, flush=True)
            return cli, how
        print(f"  attempt {attempt + 1} failed: {' '.join(spec)}", flush=True)
    raise RuntimeError("no Infinity install worked; see pip's output above")
