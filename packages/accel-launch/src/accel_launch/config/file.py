"""Where the config file lives, and reading and writing it (yaml is imported only in here, when used)."""

from __future__ import annotations

import functools
import os
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_launch.config.schema import KEYS, ConfigError, check_file_values

CONFIG_NAME = "default_config.yaml"


@dataclass(frozen=True)
class ConfigLocation:
    """The config file to use and whether the user named it (a named file must exist)."""

    path: Path
    explicit: bool


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Return where the default config is read and written, ignoring `$ACCEL_CONFIG_FILE`.

    `$ACCEL_HOME/default_config.yaml`, else `$XDG_CACHE_HOME/accel/...`, else `~/.cache/accel/...`.
    """
    from accel_state.environment import env_vars

    environ = os.environ if environ is None else environ
    if environ.get(env_vars.HOME):
        return Path(environ[env_vars.HOME]) / CONFIG_NAME
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "accel" / CONFIG_NAME


def locate_config(config_file: str | None = None, environ: Mapping[str, str] | None = None) -> ConfigLocation:
    """Return the config file to use: `--config_file`, else `$ACCEL_CONFIG_FILE`, else the default path."""
    from accel_state.environment import env_vars

    environ = os.environ if environ is None else environ
    if config_file:
        return ConfigLocation(Path(config_file), explicit=True)
    if environ.get(env_vars.CONFIG_FILE):
        return ConfigLocation(Path(environ[env_vars.CONFIG_FILE]), explicit=True)
    return ConfigLocation(default_config_path(environ), explicit=False)


def read_config(location: ConfigLocation) -> dict[str, Any] | None:
    """Return the checked values of the config file, or None when a default-path file does not exist.

    Raises ConfigError (one line naming the file, and the key where there is one) for a missing
    named file, unreadable or invalid YAML/JSON, a key given twice, an unknown key or a value of
    the wrong type.
    """
    path = location.path
    if not path.exists() and not location.explicit:
        return None
    return check_file_values(read_config_data(path), str(path))


def read_config_data(path: Path) -> Any:
    """Return what a config file holds as written, unchecked against the schema (YAML, or JSON by
    its suffix); raise ConfigError naming the file for a missing or unreadable file, invalid
    YAML/JSON or a key given twice."""
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    if not path.is_file():
        raise ConfigError(f"{path}: config file is not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the config file ({error})") from None
    return _parse(text, path)


class _DuplicateKey(Exception):
    """A mapping of the file gives one key twice: `key` at `line`, first at `first_line` (1-based)."""

    def __init__(self, key: Any, first_line: int, line: int) -> None:
        super().__init__(key, first_line, line)
        self.key, self.first_line, self.line = key, first_line, line


def _parse(text: str, path: Path) -> Any:
    # yaml.safe_load and json.loads keep the last of two equal keys; a config file that sets a key
    # twice is a mistake whichever value was meant, so it is refused.
    try:
        return _parse_unique_keys(text, path)
    except _DuplicateKey as duplicate:
        lines = f" (lines {duplicate.first_line} and {duplicate.line})" if duplicate.line else ""
        raise ConfigError(f"{path}: key '{duplicate.key}' is given twice{lines}") from None


def _reject_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for json.loads: the object, unless a key appears twice."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key, 0, 0)
        seen[key] = value
    return seen


@functools.lru_cache(maxsize=1)
def _unique_key_loader() -> type:
    """Return a yaml SafeLoader that raises _DuplicateKey for a key given twice in one mapping."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            first_lines: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults`: keys given next to a merge override it, as intended
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, Hashable):
                    continue  # the base class reports an unhashable key
                line = key_node.start_mark.line + 1
                if key in first_lines:
                    raise _DuplicateKey(key, first_lines[key], line)
                first_lines[key] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _parse_unique_keys(text: str, path: Path) -> Any:
    if path.suffix == ".json":
        import json

        try:
            return json.loads(text, object_pairs_hook=_reject_duplicate_pairs)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}: invalid JSON at line {error.lineno}: {error.msg}") from None
    import yaml

    try:
        return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None


def write_config(path: Path, values: Mapping[str, Any]) -> Path:
    """Write `values` (known keys only, in the table's order) as YAML to `path`; return the path."""
    import yaml

    unknown = [name for name in values if name not in KEYS]
    if unknown:
        raise ConfigError(f"{path}: refusing to write unknown key '{unknown[0]}'")
    ordered = {name: values[name] for name in sorted(values)}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    if path.suffix == ".json":
        import json

        partial.write_text(json.dumps(ordered, indent=2) + "\n", encoding="utf-8")
    else:
        partial.write_text(yaml.safe_dump(ordered, sort_keys=False), encoding="utf-8")
    os.replace(partial, path)
    return path
