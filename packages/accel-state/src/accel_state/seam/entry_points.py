"""Entry points of one group, read from the installed distributions' metadata without
`importlib.metadata`.

The command line reads its launch hooks on every start, `accel --help` included. Importing
`importlib.metadata` costs about 45 ms (email, zipfile, csv, ...) and its scan about 5 ms more;
reading the `entry_points.txt` files of the `*.dist-info` folders on `sys.path` directly costs
about 2 ms. The rules are those of `importlib.metadata.entry_points(group=...)`: the first
distribution of a name on `sys.path` wins, and a folder that cannot be read is passed over.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

_METADATA_SUFFIXES = (".dist-info", ".egg-info")


class EntryPoint:
    """One `name = value` line of a group: value is `module` or `module:attribute`.

    A plain class, not a dataclass: building a dataclass costs about a millisecond at import.
    """

    __slots__ = ("distribution", "name", "value")

    def __init__(self, name: str, value: str, distribution: str) -> None:
        self.name, self.value, self.distribution = name, value, distribution

    def __repr__(self) -> str:
        return f"EntryPoint({self.name!r}, {self.value!r}, {self.distribution!r})"

    @property
    def module(self) -> str:
        return self.value.partition(":")[0].strip()

    @property
    def attribute(self) -> str | None:
        attribute = self.value.partition(":")[2].strip()
        return attribute.split("[")[0].strip() or None


def _distribution_name(folder_name: str) -> str:
    # `accel_state-0.1.0.dist-info` -> `accel_state`; names compare as PEP 503 normalises them.
    name = folder_name.rpartition(".")[0].partition("-")[0]
    return name.lower().replace("-", "_").replace(".", "_")


def _group_lines(text: str, group: str) -> Iterable[tuple[str, str]]:
    """Yield (name, value) of the lines of section `[group]` of an entry_points.txt."""
    inside = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            inside = line == f"[{group}]"
            continue
        if inside and "=" in line:
            name, _, value = line.partition("=")
            yield name.strip(), value.strip()


def entry_points(group: str, path: Iterable[str] | None = None) -> list[EntryPoint]:
    """Return the entry points of `group` declared by the distributions found on `path` (sys.path)."""
    header = f"[{group}]"
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for folder in sys.path if path is None else path:
        try:
            entries = list(os.scandir(folder or "."))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.endswith(_METADATA_SUFFIXES):
                continue
            distribution = _distribution_name(entry.name)
            if distribution in seen:
                continue
            seen.add(distribution)
            try:
                with open(os.path.join(entry.path, "entry_points.txt"), encoding="utf-8") as file:
                    text = file.read()
            except OSError:
                continue
            if header in text:
                found += [EntryPoint(name, value, distribution) for name, value in _group_lines(text, group)]
    return found
