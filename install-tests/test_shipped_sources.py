"""Every source file the repository tracks ships in its package's wheel.

hatchling leaves out of a wheel whatever `.gitignore` names: an ignore pattern that also matches a
folder inside a package (`runs/` once matched `accel_launch/runs/`) builds wheels that lack a
module the tests in the repository import fine. The check asks git which tracked files an ignore
pattern matches.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from install_lines import ROOT

NO_CLONE = shutil.which("git") is None or not (ROOT / ".git").exists()


@pytest.mark.skipif(NO_CLONE, reason="needs git and a clone of the repository")
def test_no_tracked_package_file_is_ignored():
    ignored = subprocess.run(
        ["git", "ls-files", "--cached", "--ignored", "--exclude-standard", "--", "packages"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not ignored, f"tracked but matched by .gitignore, so left out of the wheels: {ignored}"
