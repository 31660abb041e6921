"""Our packages as the GPU machine sees them: source folders on PYTHONPATH, not installed. `accel_state`
finds its backends and launch hooks through entry points, which a source folder does not declare:
`package_metadata` writes the `*.dist-info` folders that declare them, from each pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.launchers import REPO_ROOT

# The packages the check runs; the adapters are left out (their engines are not what this check is
# about, and undeclared they keep their stand-ins).
CHECKED_PACKAGES = ("accel-state", "accel-data", "accel-amp", "accel-launch", "accel-big-modeling", "accel")


def package_metadata(folder: Path, force: bool = False) -> list[str]:
    """Write a `<name>-<version>.dist-info` (METADATA, entry_points.txt) into `folder` for each of
    CHECKED_PACKAGES not installed here (each of them with `force`); return the distributions written."""
    from importlib import metadata

    written = []
    for package in CHECKED_PACKAGES:
        name, version, groups = read_pyproject(REPO_ROOT / "packages" / package / "pyproject.toml")
        if not force:
            try:
                metadata.distribution(name)
                continue
            except metadata.PackageNotFoundError:
                pass
        info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        sections = [
            f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items())
            for group, entries in groups.items()
        ]
        (info / "entry_points.txt").write_text("\n".join(sections))
        written.append(name)
    return written


def read_pyproject(path: Path) -> tuple[str, str, dict[str, dict[str, str]]]:
    """Return a package's name, version (hatch reads it from `__about__.py`) and entry points by group.

    A line parser, not tomllib: the GPU machine's python may predate it, and our files keep to
    `key = "value"` lines."""
    name, version, groups, group = "", "0", {}, None
    for line in path.read_text().splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith("["):
            header = line.strip("[]")
            prefix = "project.entry-points."
            group = header[len(prefix) :].strip('"') if header.startswith(prefix) else None
            if group is not None:
                groups[group] = {}
            continue
        key, equals, value = line.partition("=")
        if not equals:
            continue
        key, value = key.strip().strip('"'), value.strip().strip('"')
        if group is not None:
            groups[group][key] = value
        elif key == "name" and not name:
            name = value
        elif key == "path" and value.endswith("__about__.py"):
            about = (path.parent / value).read_text()
            version = next(
                (
                    v.split("=")[1].strip().strip("\"'")
                    for v in about.splitlines()
                    if v.startswith("__version__")
                ),
                version,
            )
    return name, version, groups
