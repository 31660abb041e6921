"""Names a package exports but imports on first use (PEP 562), so that importing the package stays
cheap (no torch for the launcher's `accel --help`), written once for every package of accel."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any


def lazy_attribute(package: str, homes: Mapping[str, str], name: str) -> Any:
    """Return `name` of `package` from its home module (`homes[name]`, absolute or relative to the
    package: `.seam.backend`), kept on the package so that the import happens once; an unknown
    name is the AttributeError Python would raise. A package's `__getattr__` calls this."""
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, package), name)
    setattr(sys.modules[package], name, value)
    return value


def lazy_dir(package: str, homes: Mapping[str, str]) -> list[str]:
    """Return what `dir(package)` shows: what it holds now and every name it imports on first use."""
    return sorted(set(vars(sys.modules[package])) | set(homes))
