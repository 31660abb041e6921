"""Every install command the docs and error messages show names our packages by their folders.

`accel` on the public index is an unrelated project (0.3.0), and no `accel-*` is there at all:
a requirement that names one of ours by name replaces ours, or fails in a fresh venv. These checks
read the files only; test_install_lines.py runs each command.
"""

from __future__ import annotations

import re

import pytest
from install_lines import (
    FROM_ROOT,
    ROOT,
    command_of,
    documentation_files,
    documented_commands,
    install_segments,
    local_folder,
    local_needs,
    message_strings,
    our_distribution,
    pip_arguments,
    requirement_name,
    requirements,
)

DOCUMENTED = documented_commands()
MESSAGES = message_strings()
CONSTRAINT_FILES = ("constraints.txt", "constraints-xla.txt")


def _problems(command: str) -> list[str]:
    """Return what would make `command` fetch one of ours from an index, or miss a sibling."""
    problems: list[str] = []
    for segment in install_segments(command):
        wanted = requirements(segment)
        folders: dict[str, set[str]] = {}
        for requirement in wanted:
            local = local_folder(requirement)
            if local is not None:
                folders.setdefault(local[0], set()).update(local[1])
            elif our_distribution(requirement_name(requirement)) or "packages/" in requirement:
                problems.append(f"{requirement!r} is no ./packages/NAME folder: pip takes it from an index")
        if not folders:
            continue
        for name, extras in folders.items():
            for needed in sorted(local_needs(name, extras) - set(folders)):
                problems.append(f"./packages/{name} needs ./packages/{needed} on the same line")
        arguments = pip_arguments(segment)
        constraints = [arguments[i + 1] for i, w in enumerate(arguments[:-1]) if w in ("-c", "--constraint")]
        if not any(c in CONSTRAINT_FILES for c in constraints):
            problems.append("installs our packages without -c constraints.txt (or constraints-xla.txt)")
    return problems


def test_the_docs_show_install_commands():
    # The extraction itself: losing the README's main line would make every check below vacuous.
    places = {shown.where.split(":")[0] for shown in DOCUMENTED}
    assert {"README.md", "docs/index.md", "packages/accel/README.md"} <= places
    assert any("examples/nlp_classification.py" in shown.command for shown in DOCUMENTED)


@pytest.mark.parametrize("shown", DOCUMENTED, ids=str)
def test_documented_command_installs_ours_from_their_folders(shown):
    assert _problems(shown.command) == [], shown.where


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.where)
def test_install_hint_of_a_message_is_a_documented_command(message):
    command = command_of(message.command)
    installs_ours = any(
        local_folder(r) is not None or our_distribution(requirement_name(r))
        for segment in install_segments(command)
        for r in requirements(segment)
    )
    if not installs_ours:
        return  # a third-party package (tensorboard, torchdata): any pip installs it
    assert FROM_ROOT in message.command, f"{message.where}: say where to run it ({FROM_ROOT!r})"
    assert _problems(command) == [], message.where
    # Documented, so test_install_lines.py runs it in a fresh venv.
    assert command in {shown.command for shown in DOCUMENTED}, f"{message.where}: {command}"


# `accel[deepspeed]` in prose reads as something to give pip; `./packages/accel[deepspeed]` is one.
_BARE_EXTRA = re.compile(r"(?<![\w./-])accel(?:-[a-z]+)?\[[a-z,]+\]")


@pytest.mark.parametrize("path", documentation_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_name_no_extra_of_ours_without_its_folder(path):
    text = path.read_text()
    bare = [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in _BARE_EXTRA.finditer(text)]
    assert bare == []


@pytest.mark.parametrize(
    "bad",
    [
        "pip install 'accel[deepspeed]'",
        "pip install -c constraints.txt ./packages/accel-deepspeed deepspeed==0.19.8",
        "pip install ./packages/accel-state ./packages/accel-xla torch==2.9.0",
        "pip install -c constraints.txt './packages/accel-launch[plot]'",
        "pip install -c constraints.txt ./packages/accel-state ./packages/accel-launch ./packages/accel",
        "python3 -m venv .venv && .venv/bin/pip install accel-state",
    ],
)
def test_the_check_refuses_the_lines_that_failed(bad):
    # Each of these failed in a fresh venv or installed the index's `accel`.
    assert _problems(bad)
