"""The facade names no engine and no backend, and branches on none: it delegates to the one
backend the seam chose.

Every identifier, string (docstrings included) and comment of `accel/accelerator.py` is searched for
the names of the engines and in-tree backends, in any case. Accelerate's own keywords and
properties are the exceptions, listed below: they may appear (in the signature, the table of
plugin arguments and the properties of the same names), but no condition may test them.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import accel.accelerator

ENGINE_NAMES = re.compile(r"(?<![a-z])(deepspeed|xla|fsdp|ddp|native)", re.IGNORECASE)
# Accelerate's public names on the Accelerator: its keyword arguments and properties.
ACCELERATE_NAMES = ("deepspeed_plugin", "fsdp_plugin", "is_fsdp2", "ddp_kwargs", "ddp_handler")
FACADE = Path(accel.accelerator.__file__)


def _without_accelerate_names(text: str) -> str:
    for name in ACCELERATE_NAMES:
        text = re.sub(rf"\b{name}\b", "", text)
    return text


def test_the_facade_names_no_engine_beyond_accelerates_keywords():
    source = FACADE.read_text(encoding="utf-8")
    named = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT)
        and ENGINE_NAMES.search(_without_accelerate_names(token.string))
    ]
    assert named == []
    assert all(name in source for name in ACCELERATE_NAMES), "an exception is no longer needed: drop it"


def test_no_condition_of_the_facade_tests_an_engine_keyword():
    tree = ast.parse(FACADE.read_text(encoding="utf-8"))
    conditions = [
        node.test for node in ast.walk(tree) if isinstance(node, ast.If | ast.IfExp | ast.While | ast.Assert)
    ] + [node for node in ast.walk(tree) if isinstance(node, ast.BoolOp)]
    branching = [
        (condition.lineno, ast.unparse(condition))
        for condition in conditions
        if ENGINE_NAMES.search(ast.unparse(condition))
    ]
    assert branching == []
