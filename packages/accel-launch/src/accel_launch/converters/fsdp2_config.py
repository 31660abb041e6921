"""Accelerate's `accelerate to-fsdp2`: a config file's FSDP1 `fsdp_config:` section in FSDP2's keys.

Accelerate's mapping (its `to_fsdp2` command and its "FSDP1 vs FSDP2" guide): `fsdp_sharding_strategy`
becomes `fsdp_reshard_after_forward` (FULL_SHARD and HYBRID_SHARD true, the others false), as does a
strategy name that newer `accelerate config` writes under `fsdp_reshard_after_forward` itself; the
prefetch, `fsdp_sync_module_states` and `fsdp_use_orig_params` keys are dropped (FSDP2 behaves so
whatever they say); the other keys are kept; `fsdp_version` becomes 2. FSDP1's LOCAL_STATE_DICT,
which FSDP2 has not, becomes SHARDED_STATE_DICT (Accelerate keeps it; our loader refuses it).
The rest of the file is kept as it is. The result is checked against the config schema before
anything is written, so a file this writes is one `accel launch --config_file` accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_launch.config.file import read_config_data, write_config
from accel_launch.config.schema import ConfigError, check_file_values
from accel_state.backends.fsdp.fsdp1_options import (
    MESH_SHAPING,
    RESHARD_AFTER_FORWARD,
    Fsdp1OptionError,
    sharding_strategy_name,
)

SECTION = "fsdp_config"
# FSDP1's keys that FSDP2 has no use for, and why (each is said when dropped).
DROPPED_KEYS: dict[str, str] = {
    "fsdp_backward_prefetch": "FSDP2 always prefetches the next module's weights in backward (BACKWARD_PRE)",
    "fsdp_forward_prefetch": "FSDP2 has no forward prefetch setting; it schedules its all-gathers itself",
    "fsdp_sync_module_states": "FSDP2 starts every process from the main process's weights",
    "fsdp_use_orig_params": "FSDP2 always trains the original parameters (as DTensors)",
}
# The keys whose FSDP1 strategy name (or number 1-5) becomes fsdp_reshard_after_forward.
STRATEGY_KEYS = ("fsdp_sharding_strategy", "fsdp_reshard_after_forward")


@dataclass
class Fsdp2Rewrite:
    """A rewritten config and one line per change (or why nothing changed)."""

    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    converted: bool = False


def rewrite_to_fsdp2(config: Mapping[str, Any]) -> Fsdp2Rewrite:
    """Return `config` with its `fsdp_config` section in FSDP2's keys (a copy; `config` is unchanged).

    A config without the section, or whose section already says `fsdp_version: 2`, comes back as it
    is, with a note saying so (as Accelerate does). Raises ConfigError for a strategy it cannot map.
    """
    result = Fsdp2Rewrite(dict(config))
    section = config.get(SECTION)
    if not section:
        result.notes.append(f"no {SECTION} section: nothing to convert, the file is written unchanged")
        return result
    if not isinstance(section, Mapping):
        raise ConfigError(f"key '{SECTION}' must be a mapping, got {section!r}")
    if str(section.get("fsdp_version")) == "2":
        result.notes.append(
            f"{SECTION}.fsdp_version is already 2: nothing to convert, the file is written unchanged"
        )
        return result
    rewritten: dict[str, Any] = {}
    for key, value in section.items():
        if key == "fsdp_version":
            continue
        if key in DROPPED_KEYS:
            result.notes.append(f"dropped {key} ({_word(value)}): {DROPPED_KEYS[key]}")
        elif (
            key in STRATEGY_KEYS
            and not isinstance(value, bool)
            and str(value).lower() not in ("true", "false")
        ):
            rewritten["fsdp_reshard_after_forward"] = _reshard_after_forward(key, value, result.notes)
        elif key == "fsdp_state_dict_type" and value == "LOCAL_STATE_DICT":
            rewritten[key] = "SHARDED_STATE_DICT"
            result.notes.append(
                "fsdp_state_dict_type LOCAL_STATE_DICT -> SHARDED_STATE_DICT (FSDP2 has no flat local "
                "state dict; each process saves its own shard)"
            )
        else:
            rewritten[key] = value
    rewritten["fsdp_version"] = 2
    result.notes.append(f"{SECTION}.fsdp_version {_word(section.get('fsdp_version', 1))} -> 2")
    result.config[SECTION] = dict(sorted(rewritten.items()))
    result.converted = True
    return result


def _reshard_after_forward(key: str, value: Any, notes: list[str]) -> bool:
    try:
        strategy = sharding_strategy_name(value)
    except Fsdp1OptionError as error:
        raise ConfigError(f"key '{SECTION}.{key}' {value!r} {error}") from None
    reshard = RESHARD_AFTER_FORWARD[strategy]
    notes.append(f"{key} {_word(value)} -> fsdp_reshard_after_forward {_word(reshard)}")
    if strategy in MESH_SHAPING:
        notes.append(
            f"{strategy} also laid the processes out as replicas x shards; FSDP2 shards over every "
            "process unless parallelism_config sets parallelism_config_dp_replicate_size"
        )
    return reshard


def _word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def read_raw_config(path: Path) -> dict[str, Any]:
    """Return a config file's keys and values as written (the schema's reader drops the keys it passes
    over, which this rewrite must see to say that it drops them); raise ConfigError naming the file."""
    data = read_config_data(path)
    if data is None:
        raise ConfigError(f"{path}: the config file is empty")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the file must hold a mapping of keys to values, got {type(data).__name__}"
        )
    return data


def output_path(config_file: Path, output_file: str | None, overwrite: bool) -> Path:
    """Return where the rewritten file goes: `output_file`, or `config_file` itself with `overwrite`;
    raise ConfigError("... exists; pass --overwrite to replace it") for an existing one without it."""
    if output_file is None and not overwrite:
        raise ConfigError(f"pass --output_file, or --overwrite to rewrite {config_file} in place")
    target = Path(output_file) if output_file is not None else config_file
    if target.is_dir():
        raise ConfigError(f"{target}: a folder, not a config file")
    if target.exists() and not overwrite:
        raise ConfigError(f"{target} exists; pass --overwrite to replace it")
    return target


def convert_config_file(
    config_file: str | Path, output_file: str | None, overwrite: bool
) -> tuple[Path, Fsdp2Rewrite]:
    """Rewrite `config_file` for FSDP2 into `output_file` (through a temporary name renamed into place);
    return where it was written and what changed. Nothing is written when the result would not load."""
    source = Path(config_file)
    raw = read_raw_config(source)
    target = output_path(source, output_file, overwrite)
    try:
        rewrite = rewrite_to_fsdp2(raw)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    # The result must load as `accel launch --config_file` loads it; its keys all come from the input.
    check_file_values(rewrite.config, str(source))
    try:
        write_config(target, rewrite.config)
    except OSError as error:
        raise ConfigError(f"{target}: cannot write ({error.strerror or error})") from None
    return target, rewrite
