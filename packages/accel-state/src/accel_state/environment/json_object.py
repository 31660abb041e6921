"""Reads a JSON file that must hold one object (an engine's config), with a one-line reason when
it cannot be used. Imports nothing heavy: the launcher checks such files before starting anything."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class JsonObjectError(ValueError):
    """The file cannot be used as a JSON object; the message is the reason, without the path."""


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the object in the JSON file `path`; raise JsonObjectError saying why it cannot be used."""
    file = Path(path).expanduser()
    if not file.exists():
        raise JsonObjectError("file not found")
    if not file.is_file():
        raise JsonObjectError("not a file")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise JsonObjectError(f"cannot be read ({error})") from None
    try:
        # DeepSpeed itself refuses a key given twice; so does this reader.
        data = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except json.JSONDecodeError as error:
        raise JsonObjectError(
            f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    except _DuplicateKey as duplicate:
        raise JsonObjectError(f"key '{duplicate.key}' is given twice") from None
    if not isinstance(data, dict):
        raise JsonObjectError(f"must hold a JSON object, got {type(data).__name__}")
    return data


def json_object_problem(path: str | os.PathLike[str]) -> str | None:
    """Return why `path` cannot be used as a JSON object, or None when it can."""
    try:
        read_json_object(path)
    except JsonObjectError as error:
        return str(error)
    return None
