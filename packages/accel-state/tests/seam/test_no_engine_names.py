"""The seam names no engine and no backend: a new one plugs in without editing `seam/`.

Every identifier, string (docstrings included) and comment of `accel_state/seam/` is searched for
the names of the engines and in-tree backends, as whole words or parts of identifiers
(`NativeBackend`, `torch_xla`), in any case.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import accel_state.seam

ENGINE_NAMES = re.compile(r"(?<![a-z])(deepspeed|xla|fsdp|ddp|native)", re.IGNORECASE)
SEAM = Path(accel_state.seam.__file__).parent


def engine_names(source: str) -> list[tuple[int, str]]:
    """Return (line, token) for each identifier, string or comment of `source` naming an engine."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT) and ENGINE_NAMES.search(
            token.string
        ):
            found.append((token.start[0], token.string))
    return found


def test_the_search_finds_names_in_identifiers_strings_and_comments():
    source = (
        'class NativeBackend:\n    """On DeepSpeed."""\n    x = "torch_xla"  # FSDP2\n    alternative = 1\n'
    )
    assert [line for line, _ in engine_names(source)] == [1, 2, 3, 3]


def test_no_module_of_the_seam_names_an_engine_or_backend():
    modules = sorted(SEAM.glob("*.py"))
    assert len(modules) >= 4, f"the seam's modules were not found in {SEAM}"
    named = {
        f"{path.name}:{line}": token
        for path in modules
        for line, token in engine_names(path.read_text(encoding="utf-8"))
    }
    assert named == {}
