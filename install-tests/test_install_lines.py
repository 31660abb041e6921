"""Each install command the docs and error messages show, run as written in a fresh venv.

From the repository root, with `pip` (or `.venv/bin/pip`, `python3 -m pip`) replaced by the new
venv's pip and nothing else changed: the install must succeed, every `accel*` distribution must
be ours and come from its folder (never from an index, where `accel` is another project), torch
must be the CPU build the constraints pin, and the packages must import. The pip configuration
of the machine (its wheel folders and cache) is used as it is.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import tomllib
from install_lines import (
    PACKAGE_NAMES,
    PACKAGES_DIR,
    ROOT,
    documented_commands,
    install_segments,
    local_folder,
    our_distribution,
    requirement_name,
    requirements,
)

pytestmark = pytest.mark.slow

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
_PIP_CALL = re.compile(r"^(?:\S*/)?(?:python3?\s+-m\s+)?pip3?\s+install\b")


def _unique_installs() -> list[tuple[str, str]]:
    """Return (where, command) for each distinct install of our folders, first place shown."""
    seen: dict[tuple[str, ...], tuple[str, str]] = {}
    for shown in documented_commands():
        segments = install_segments(shown.command)
        if not any(local_folder(r) for segment in segments for r in requirements(segment)):
            continue  # installs none of ours (nox): test_documented_lines checks it names none
        key = tuple(_PIP_CALL.sub("pip install", segment) for segment in segments)
        seen.setdefault(key, (shown.where, " && ".join(key)))
    return list(seen.values())


INSTALLS = _unique_installs()


def _clean_env() -> dict[str, str]:
    # The venv must see only what the line installed: no source folders, no outer venv.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PIP_NO_INPUT"] = "1"
    return env


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, env=_clean_env(), capture_output=True, text=True, **kwargs)


def _fresh_venv(folder: Path) -> Path:
    result = _run([sys.executable, "-m", "venv", str(folder)])
    assert result.returncode == 0, result.stderr
    return folder / "bin"


def _as_venv_pip(segment: str, bin_dir: Path) -> list[str]:
    """Return the segment's words with its pip call replaced by the venv's pip."""
    words = shlex.split(_PIP_CALL.sub("pip install", segment))
    assert words[:2] == ["pip", "install"], segment
    return [str(bin_dir / "pip"), *words[1:]]


def _version(package: str) -> str:
    about = next((PACKAGES_DIR / package / "src").glob("*/__about__.py"))
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", about.read_text())
    assert match is not None, about
    return match.group(1)


def _optional(package: str, extras: set[str]) -> set[str]:
    meta = tomllib.loads((PACKAGES_DIR / package / "pyproject.toml").read_text())["project"]
    names: set[str] = set()
    for extra in extras:
        names |= {requirement_name(r) for r in meta.get("optional-dependencies", {}).get(extra, [])}
    return names


def _pinned_torch(command: str) -> str:
    constraints = "constraints-xla.txt" if "constraints-xla.txt" in command else "constraints.txt"
    pins = re.findall(r"^torch==(\S+)", (ROOT / constraints).read_text(), re.MULTILINE)
    assert len(pins) == 1, constraints
    return pins[0]


def _reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=15)
    except OSError:
        return False
    return True


def _installed(bin_dir: Path) -> dict[str, dict]:
    result = _run([str(bin_dir / "pip"), "inspect"])
    assert result.returncode == 0, result.stderr
    return _by_name(json.loads(result.stdout)["installed"])


def _by_name(items: list[dict]) -> dict[str, dict]:
    return {item["metadata"]["name"].lower().replace("_", "-"): item for item in items}


@pytest.mark.parametrize(("where", "command"), INSTALLS, ids=[where for where, _ in INSTALLS])
def test_install_line_works_verbatim_in_a_fresh_venv(where, command, tmp_path):
    if CPU_INDEX in command and not _reachable(f"{CPU_INDEX}/torch/"):
        pytest.skip(f"{CPU_INDEX} cannot be reached from here (test_xla_line_resolves_... checks the rest)")
    bin_dir = _fresh_venv(tmp_path / "venv")
    for segment in install_segments(command):
        result = _run(_as_venv_pip(segment, bin_dir), timeout=1500)
        assert result.returncode == 0, f"{where}: {segment}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"

    folders: dict[str, set[str]] = {}
    others: set[str] = set()
    for segment in install_segments(command):
        for requirement in requirements(segment):
            local = local_folder(requirement)
            if local:
                folders.setdefault(local[0], set()).update(local[1])
            else:
                others.add(requirement_name(requirement))
    installed = _installed(bin_dir)

    # Ours, each from its folder at its version; nothing named like ours from anywhere else.
    for name, dist in installed.items():
        if our_distribution(name):
            assert name in folders, f"{where}: {name} was installed but not asked for"
            url = (dist.get("direct_url") or {}).get("url", "")
            assert url == (PACKAGES_DIR / name).as_uri(), f"{where}: {name} came from {url or 'an index'}"
            assert dist["metadata"]["version"] == _version(name), name
    assert set(folders) <= set(installed), f"{where}: missing {set(folders) - set(installed)}"
    if "accel" in folders:
        shown = _run([str(bin_dir / "pip"), "show", "accel"]).stdout
        assert f"Version: {_version('accel')}" in shown, shown
        assert f"Location: {tmp_path / 'venv'}" in shown, shown

    # What the extras and the line add, and the CPU build of torch that the constraints pin.
    for name, extras in folders.items():
        wanted = {n for n in _optional(name, extras) if n not in PACKAGE_NAMES}
        assert wanted <= set(installed), f"{where}: {name}{sorted(extras)} lacks {wanted - set(installed)}"
    assert others <= set(installed), f"{where}: lacks {others - set(installed)}"
    torch_version = installed["torch"]["metadata"]["version"]
    assert torch_version.split("+")[0] == _pinned_torch(command), torch_version
    assert not [n for n in installed if n.startswith("nvidia-")], f"{where}: a CUDA torch was installed"

    modules = sorted(name.replace("-", "_") for name in folders)
    code = "; ".join(f"import {m}" for m in modules)
    if "accel" in folders:
        code += "; from accel import Accelerator; Accelerator(cpu=True)"
    result = _run([str(bin_dir / "python"), "-c", code])
    assert result.returncode == 0, f"{where}: {code}\n{result.stderr[-3000:]}"
    if "accel-launch" in folders:
        result = _run([str(bin_dir / "accel"), "--help"])
        assert result.returncode == 0, result.stderr


XLA_INSTALLS = [(where, command) for where, command in INSTALLS if "constraints-xla.txt" in command]


@pytest.mark.parametrize(("where", "command"), XLA_INSTALLS, ids=[where for where, _ in XLA_INSTALLS])
def test_xla_line_resolves_ours_from_their_folders_and_torch_xla_to_its_torch(where, command, tmp_path):
    # Where PyTorch's CPU index cannot be reached the line cannot run (PyPI's torch 2.9.0 is the
    # CUDA build); pip's resolution of its second part is checked instead, downloading no wheel.
    bin_dir = _fresh_venv(tmp_path / "venv")
    segment = next(s for s in install_segments(command) if "constraints-xla.txt" in s)
    report = tmp_path / "report.json"
    args = [*_as_venv_pip(segment, bin_dir), "--dry-run", "--quiet", "--report", str(report)]
    result = _run(args, timeout=900)
    assert result.returncode == 0, f"{where}: {segment}\n{result.stderr[-3000:]}"
    resolved = _by_name(json.loads(report.read_text())["install"])
    for name, item in resolved.items():
        if our_distribution(name):
            url = item["download_info"]["url"]
            assert url == (PACKAGES_DIR / name).as_uri(), f"{where}: {name} would come from {url}"
    assert resolved["torch-xla"]["metadata"]["version"] == "2.9.0"
    assert resolved["torch"]["metadata"]["version"].split("+")[0] == _pinned_torch(command)
