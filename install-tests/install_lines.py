"""Every install command the repository shows a user, found where it is shown.

The READMEs, the guides under docs/, the examples' docstrings and the error messages of the
packages are searched, so a new line is covered by the tests without being listed anywhere. A
command is what a user would paste: a code line (backslash continuations joined, a trailing
comment dropped) or an inline code span, holding `pip install`.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGES_DIR = ROOT / "packages"
PACKAGE_NAMES = sorted(path.parent.name for path in PACKAGES_DIR.glob("*/pyproject.toml"))
# Where an error message says to run its command from (the paths in it are relative to that).
FROM_ROOT = "from the repository root: "

_FENCE = re.compile(r"^```.*?$(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`]+)`")
_PIP = re.compile(r"(?:^|(?<=[\s(]))(?:\S*/)?(?:python3?\s+-m\s+)?pip3?\s+install\b")


@dataclass(frozen=True)
class Shown:
    """One install command and where a user reads it."""

    command: str
    where: str  # file (repo-relative) and line

    def __str__(self) -> str:
        return f"{self.where}: {self.command}"


def documentation_files() -> list[Path]:
    """Return the files a user reads install lines in: READMEs, docs/, the examples."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    files += sorted(PACKAGES_DIR.glob("*/README.md"))
    files += sorted((ROOT / "examples").glob("README*"))
    files += sorted((ROOT / "examples").glob("*.py"))
    return [path for path in files if path.is_file()]


def _normalise(command: str) -> str:
    return " ".join(command.replace("\\\n", " ").split())


def _code_lines(block: str) -> Iterator[tuple[int, str]]:
    """Yield (offset in block, line) of a code block, continuations joined, comments dropped."""
    offset = 0
    pending: list[str] = []
    start = 0
    for raw in block.splitlines(keepends=True):
        line = raw.rstrip("\n")
        if not pending:
            start = offset
        offset += len(raw)
        if line.rstrip().endswith("\\"):
            pending.append(line.rstrip()[:-1])
            continue
        pending.append(line)
        joined = " ".join(pending)
        pending = []
        # A comment starts at " #" outside quotes; install lines hold no '#' of their own.
        yield start, joined.split(" #")[0]


def _commands_in_text(text: str, *, prose_lines: bool) -> Iterator[tuple[int, str]]:
    """Yield (offset, command) for each install command in markdown (or docstring) text."""
    prose_start = 0
    pieces: list[tuple[int, str, bool]] = []
    for fence in _FENCE.finditer(text):
        pieces.append((prose_start, text[prose_start : fence.start()], False))
        pieces.append((fence.start(1), fence.group(1), True))
        prose_start = fence.end()
    pieces.append((prose_start, text[prose_start:], False))
    for base, piece, is_code in pieces:
        if is_code:
            for offset, line in _code_lines(piece):
                if _PIP.search(line):
                    yield base + offset, command_of(line)
            continue
        spans = list(_SPAN.finditer(piece))
        for span in spans:
            if _PIP.search(span.group(1)):
                yield base + span.start(), command_of(span.group(1))
        if prose_lines:
            # A docstring shows commands as indented lines, outside backticks.
            stripped = _SPAN.sub(lambda m: " " * len(m.group(0)), piece)
            for offset, line in _code_lines(stripped):
                if line.startswith("    ") and _PIP.search(line):
                    yield base + offset, command_of(line)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def documented_commands() -> list[Shown]:
    """Return every install command shown in the documentation, with its file and line."""
    found: list[Shown] = []
    for path in documentation_files():
        text = path.read_text()
        base = 0
        if path.suffix == ".py":
            docstring = ast.get_docstring(ast.parse(text), clean=False)
            if not docstring:
                continue
            # Offsets count from the opening quotes: the docstring is searched as written there.
            base = text.index('"""') + 3
            text_to_search = text[base : text.index('"""', base)]
        else:
            text_to_search = text
        for offset, command in _commands_in_text(text_to_search, prose_lines=path.suffix == ".py"):
            where = f"{path.relative_to(ROOT)}:{_line_of(text, base + offset)}"
            found.append(Shown(command, where))
    return found


def message_strings() -> list[Shown]:
    """Return every string in the packages' sources that tells a user to `pip install` something."""
    found: list[Shown] = []
    for path in sorted(PACKAGES_DIR.glob("*/src/**/*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _PIP.search(node.value):
                found.append(Shown(node.value, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return found


def command_of(text: str) -> str:
    """Return the command in a code line, span or message: from `pip install` (or the chain it is
    part of, or what follows FROM_ROOT) up to the end, a `)`, `;` or backtick."""
    if FROM_ROOT in text:
        text = text.split(FROM_ROOT, 1)[1]
    else:
        match = _PIP.search(text)
        assert match is not None, text
        if "&&" not in text[: match.start()]:
            text = text[match.start() :]
    return _normalise(re.split(r"[);`]", text, maxsplit=1)[0])


def install_segments(command: str) -> list[str]:
    """Return the `pip install ...` parts of a command line (split on `&&`)."""
    return [part.strip() for part in command.split("&&") if _PIP.search(part)]


def pip_arguments(segment: str) -> list[str]:
    """Return the words after `pip install` in one segment."""
    words = shlex.split(segment)
    index = words.index("install")
    return words[index + 1 :]


def requirements(segment: str) -> list[str]:
    """Return the requirements of one `pip install` segment (its options and their values left out)."""
    takes_value = {"-c", "--constraint", "-r", "--requirement", "-i", "--index-url", "--extra-index-url"}
    takes_value |= {"-f", "--find-links", "--report", "-t", "--target"}
    words = pip_arguments(segment)
    wanted: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in takes_value:
            skip = True
        elif not word.startswith("-"):
            wanted.append(word)
    return wanted


def local_folder(requirement: str) -> tuple[str, set[str]] | None:
    """Return (package folder name, extras) for `./packages/NAME[extras]`; None for anything else."""
    match = re.fullmatch(r"\./packages/([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", requirement)
    if match is None:
        return None
    extras = {extra.strip() for extra in (match.group(2) or "").split(",") if extra.strip()}
    return match.group(1), extras


def requirement_name(requirement: str) -> str:
    """Return the distribution name of a requirement string (`torch==2.9.0` -> `torch`)."""
    return re.split(r"[<>=!~\[;( ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def _package_meta(name: str) -> dict:
    return tomllib.loads((PACKAGES_DIR / name / "pyproject.toml").read_text())["project"]


def local_needs(name: str, extras: set[str]) -> set[str]:
    """Return the sibling folders `name` with `extras` needs, itself included, transitively."""
    needed: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(name, frozenset(extras))]
    while todo:
        current, current_extras = todo.pop()
        if (current, current_extras) in seen:
            continue
        seen.add((current, current_extras))
        needed.add(current)
        meta = _package_meta(current)
        wanted = list(meta.get("dependencies", []))
        for extra in current_extras:
            wanted += meta.get("optional-dependencies", {}).get(extra, [])
        for requirement in wanted:
            dependency = requirement_name(requirement)
            if dependency in PACKAGE_NAMES:
                match = re.search(r"\[([^\]]*)\]", requirement)
                sub_extras = frozenset(e.strip() for e in match.group(1).split(",")) if match else frozenset()
                todo.append((dependency, sub_extras))
    return needed


def our_distribution(name: str) -> bool:
    """Return whether a distribution name is one of ours (or could be mistaken for one)."""
    return name in PACKAGE_NAMES or name == "accel" or name.startswith("accel-")
