"""Fail, naming each one, when a public name has no docstring or no place in the API reference.

mkdocstrings renders what has a docstring and skips the rest without a word, so `mkdocs build
--strict` alone would let an undocumented public name through. Public means: listed in `__all__`
of a package (or of one of Accelerate's modules below), plus the public methods and properties of
those classes, inherited ones from our own packages included. The sources are read with griffe:
no package and no torch is imported, so this runs in the small docs venv.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parent.parent
SOURCE_FOLDERS = sorted(str(path) for path in ROOT.glob("packages/*/src"))
REFERENCE = ROOT / "docs" / "reference"
# Accelerate's module names that accel keeps beside the top-level names.
PUBLIC_SUBMODULES = ("accel.utils", "accel.logging", "accel.local_sgd")
# Protocols whose method docstrings also document their structural implementations.
PROTOCOLS = (
    "accel_state.seam.backend.Backend",
    "accel_state.seam.backend.BackendFactory",
    "accel_state.seam.communication.Communicator",
    "accel_state.seam.precision_protocol.Precision",
)
DIRECTIVE = re.compile(r"^:::\s+(\S+)", re.MULTILINE)


def top_level_packages() -> list[str]:
    """Return the import name of every package under packages/*/src."""
    return sorted(path.parent.name for path in ROOT.glob("packages/*/src/*/__init__.py"))


def find_definition(module: griffe.Module, name: str) -> griffe.Object | None:
    """Return the object `name` of `module`, following re-exports and lazy (PEP 562) homes."""
    member = module.members.get(name)
    if member is None:
        # Not bound statically: a package-level __getattr__ imports it from one of its submodules,
        # at any depth (`accel_state.shared_state.partial_state`).
        return _defined_below(module, name)
    if not member.is_alias:
        return member  # type: ignore[return-value]
    try:
        return member.final_target  # type: ignore[union-attr]
    except griffe.AliasResolutionError:
        # A re-export of a lazy name (`from accel_state import gather`): look in its home package.
        target_module, _, target_name = member.target_path.rpartition(".")  # type: ignore[union-attr]
        collection = module.modules_collection
        if target_module not in collection:
            return None
        return find_definition(collection[target_module], target_name)


def _defined_below(module: griffe.Module, name: str) -> griffe.Object | None:
    """Return the first non-alias `name` defined in a submodule of `module`, searched depth first."""
    for submodule in module.modules.values():
        found = submodule.members.get(name)
        if found is not None and not found.is_alias:
            return found  # type: ignore[return-value]
        deeper = _defined_below(submodule, name)
        if deeper is not None:
            return deeper
    return None


def is_ours(obj: griffe.Object) -> bool:
    """Whether `obj` is defined in one of this repository's packages."""
    return obj.package.name in top_level_packages()


def public_members(cls: griffe.Class) -> Iterator[griffe.Object]:
    """Yield the public methods and properties of `cls`, with those it inherits from our classes."""
    for name, member in cls.all_members.items():
        if name.startswith("_"):
            continue
        if member.is_alias:
            # griffe hands inherited members over as aliases of the base class's member.
            if not getattr(member, "inherited", False):
                continue
            try:
                member = member.final_target  # type: ignore[union-attr]
            except griffe.AliasResolutionError:
                continue
        if member.is_function or (member.is_attribute and "property" in member.labels):
            if is_ours(member):  # type: ignore[arg-type]
                yield member  # type: ignore[misc]


def implements(cls: griffe.Class, protocol: griffe.Class) -> bool:
    """Whether `cls` has every public member of `protocol`."""
    wanted = {name for name in protocol.members if not name.startswith("_")}
    return bool(wanted) and wanted <= set(cls.all_members)


def has_docstring(obj: griffe.Object, owner: griffe.Class | None = None) -> bool:
    """Whether `obj` has a docstring of its own, or (a member of class `owner`) one from the same
    member of a base of `owner`.

    An implementation of one of our protocols (`Backend`, `Communicator`, `Precision`) says what
    it does in the protocol's docstring, as `inspect.getdoc` would find it.
    """
    if obj.docstring and obj.docstring.value.strip():
        return True
    parent = owner
    if parent is None:
        return False
    try:
        bases = parent.mro()
    except ValueError:
        return False
    collection = parent.modules_collection
    protocols = [collection[path] for path in PROTOCOLS]
    # Our backends implement the protocols structurally (no explicit base class).
    bases += [protocol for protocol in protocols if implements(parent, protocol)]
    for base in bases:
        inherited = base.members.get(obj.name)
        if inherited is not None and not inherited.is_alias and inherited.docstring:
            return bool(inherited.docstring.value.strip())
    return False


def documented_paths() -> set[str]:
    """Return every identifier named by a `::: identifier` line of the reference pages."""
    paths: set[str] = set()
    for page in REFERENCE.glob("*.md"):
        paths.update(DIRECTIVE.findall(page.read_text()))
    return paths


def problems() -> list[str]:
    """Return one line per public name without a docstring or without a reference entry."""
    loader = griffe.GriffeLoader(search_paths=SOURCE_FOLDERS, docstring_parser=None)
    for package in top_level_packages():
        loader.load(package)
    loader.resolve_aliases(implicit=False, external=False)
    modules = [loader.modules_collection[name] for name in [*top_level_packages(), *PUBLIC_SUBMODULES]]
    on_pages = documented_paths()
    found: list[str] = []
    checked: set[str] = set()
    for module in modules:
        names = module.exports
        if names is None:  # a module without __all__: its own public classes and functions
            names = [
                name
                for name, member in module.members.items()
                if not name.startswith("_")
                and not member.is_alias
                and (member.is_class or member.is_function)
            ]
        for name in names:
            if name == "__version__":
                continue
            obj = find_definition(module, str(name))
            if obj is None:
                found.append(f"{module.path}.{name}: listed in __all__ but not found in the sources")
                continue
            if not is_ours(obj) or obj.path in checked:
                continue
            checked.add(obj.path)
            if not (obj.docstring and obj.docstring.value.strip()):
                found.append(f"{module.path}.{name} ({obj.path}): no docstring")
            # Covered by its own `::: path` line, or by its module's (which renders every public member).
            if obj.path not in on_pages and obj.parent is not None and obj.parent.path not in on_pages:
                found.append(f"{module.path}.{name}: no '::: {obj.path}' on any page of docs/reference/")
            if obj.is_class:
                for member in public_members(obj):  # type: ignore[arg-type]
                    if member.path in checked:
                        continue
                    checked.add(member.path)
                    if not has_docstring(member, obj):  # type: ignore[arg-type]
                        found.append(f"{obj.path}.{member.name} ({member.path}): no docstring")
    return found


def main() -> int:
    """Print each problem and return 1 if there is any, else 0."""
    found = problems()
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(f"{len(found)} public names lack a docstring or a reference entry", file=sys.stderr)
        return 1
    print("every public name has a docstring and a reference entry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
