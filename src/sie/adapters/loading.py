"""The class an ``adapter_path`` names, imported when a model that needs it loads: one of ours, a
public name for one of ours (``sie.catalog.families.canonical``), or a custom adapter in a Python file
next to the model's YAML (``file.py:Class``, as the public server allows)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from sie.catalog.catalog import CatalogEntry
from sie.catalog.families import KNOWN, canonical

# What a class must have before it is loaded: the contract's class-level members
# (``sie.adapters.contract.Adapter``; ``tokenizer`` and ``packs_tokens`` may be set by ``load``).
CONTRACT: Final = (
    "family",
    "capabilities",
    "inputs",
    "request_options",
    "traits",
    "load",
    "prepare",
    "run",
    "close",
)


class UnknownAdapter(LookupError):
    pass


def custom_options(entry: CatalogEntry) -> frozenset[str]:
    """The request options of a custom adapter's class (``sie.catalog.options.CustomOptions``)."""
    options: frozenset[str] = adapter_class(entry.profile.adapter_path, entry.config_dir).request_options
    return options


def adapter_class(adapter_path: str, config_dir: Path | None = None) -> Any:
    """The class for ``package.module:Class``, or for ``file.py:Class`` (a custom adapter in a Python
    file next to the model's YAML, as the public server allows); a bad name raises ``UnknownAdapter``
    listing the known ones."""
    path = canonical(adapter_path)
    module_name, _, class_name = path.partition(":")
    if not class_name:
        raise UnknownAdapter(f"adapter_path '{adapter_path}' must look like 'package.module:Class'")
    try:
        if module_name.endswith(".py"):
            module = _module_from_file((config_dir or Path.cwd()) / module_name)
        else:
            module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except (ImportError, AttributeError, FileNotFoundError) as exc:
        known = ", ".join(sorted(KNOWN))
        raise UnknownAdapter(f"cannot import adapter '{adapter_path}' ({exc}); known: {known}") from exc
    missing = [name for name in CONTRACT if not hasattr(cls, name)]
    if missing:
        raise UnknownAdapter(
            f"adapter '{adapter_path}' lacks {', '.join(missing)} of the adapter contract (docs/adapters.md)"
        )
    return cls


def _module_from_file(file: Path) -> ModuleType:
    """Import a file once per path (its module name is derived from the path, so two YAML folders may
    each have an ``adapter.py``)."""
    name = "sie_custom_adapter_" + hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file}")
    if not file.is_file():
        raise FileNotFoundError(f"{file} does not exist")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
