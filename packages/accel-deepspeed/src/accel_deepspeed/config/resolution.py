"""One DeepSpeed config from four places, under one precedence.

Precedence, for every option: the script's arguments (`Accelerator(...)`, `DeepSpeedPlugin(...)`)
> the launcher (`accel launch` flags, the YAML config) > the user's DeepSpeed JSON > what
`prepare()` sees ("auto": micro-batch size from the loader, accumulation, clipping, precision) >
DeepSpeed's defaults. A value is taken from a lower place only when no higher place sets it; a
JSON value that is not "auto" and differs from one set above it is a `DeepSpeedConfigError`
naming both (two different values cannot both be what the user meant). "auto" values nobody can
fill (e.g. bucket sizes derived from a transformer's hidden size) are removed, so DeepSpeed's
default applies. Pure Python: nothing here imports deepspeed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from accel_deepspeed.config.errors import DeepSpeedConfigError, Setting
from accel_deepspeed.config.plugin import DeepSpeedPlugin

AUTO = "auto"
_MISSING = object()
# DeepSpeed prints its progress every `steps_per_print` steps; a training script prints its own.
_QUIET_STEPS = 2**31 - 1
# DeepSpeed's "off" for gradient_clipping (its engines clip only when the value is above 0).
NO_CLIPPING = 0.0


def _lookup(config: dict[str, Any], path: str) -> Any:
    node: Any = config
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _assign(config: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b) and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return bool(a == b)


@dataclass
class ResolvedConfig:
    """The DeepSpeed config as far as it is known before `prepare()`, and what it decided."""

    config: dict[str, Any]
    source: str  # how messages name the JSON
    gradient_accumulation_steps: int
    mixed_precision: str
    stage: int
    # True when the user asked for clipping (plugin, launcher or a JSON number), not by default.
    clipping_asked: bool = False

    def conflict(self, path: str, setting: Setting, json_value: Any) -> DeepSpeedConfigError:
        return DeepSpeedConfigError(
            f"{setting.source} sets {path} to {setting.value!r} but {self.source} has "
            f'"{path}": {json_value!r}; set it in one place (or write "auto" in the JSON)'
        )

    def settle(self, path: str, setting: Setting | None, default: Any = _MISSING) -> Any:
        """Write the value of `path` by the precedence above and return it (_MISSING: unset)."""
        found = _lookup(self.config, path)
        given = found is not _MISSING and found != AUTO
        if setting is not None:
            if given and not _same(found, setting.value):
                raise self.conflict(path, setting, found)
            _assign(self.config, path, setting.value)
            return setting.value
        if given:
            return found
        if default is not _MISSING:
            _assign(self.config, path, default)
        return default


def resolve_config(
    plugin: DeepSpeedPlugin,
    *,
    accumulation: Setting | None = None,
    mixed_precision: Setting | None = None,
) -> ResolvedConfig:
    """Resolve what is known before `prepare()`: stage, offload, clipping, accumulation, precision.

    `accumulation` and `mixed_precision` are the values the script or launcher set explicitly
    (None: left to the JSON or the default).
    """
    settings = plugin.settings
    resolved = ResolvedConfig(
        config=copy.deepcopy(plugin.deepspeed_config),
        source=plugin.config_source or "the DeepSpeed config",
        gradient_accumulation_steps=1,
        mixed_precision="no",
        stage=0,
    )
    stage = resolved.settle("zero_optimization.stage", settings.get("zero_stage"), plugin.stage)
    resolved.stage = int(stage)
    _settle_offload(resolved, plugin)
    _settle_clipping(resolved, plugin)
    if "zero3_save_16bit_model" in settings:
        resolved.settle(
            "zero_optimization.stage3_gather_16bit_weights_on_model_save", settings["zero3_save_16bit_model"]
        )
    resolved.gradient_accumulation_steps = int(_settle_accumulation(resolved, plugin, accumulation))
    resolved.mixed_precision = _settle_precision(resolved, mixed_precision)
    config = resolved.config
    config.setdefault("zero_allow_untested_optimizer", True)  # a client torch optimizer under ZeRO
    config.setdefault("steps_per_print", _QUIET_STEPS)
    return resolved


def _settle_clipping(resolved: ResolvedConfig, plugin: DeepSpeedPlugin) -> None:
    """Clip only where the user asked: DeepSpeed clips to norm 1.0 when the key is missing (and
    Accelerate fills "auto" with 1.0), which would make a plain loop differ from the native one."""
    clip = resolved.settle("gradient_clipping", plugin.settings.get("gradient_clipping"))
    resolved.clipping_asked = clip is not _MISSING
    if not resolved.clipping_asked:
        resolved.config["gradient_clipping"] = NO_CLIPPING  # `clip_grad_norm_` may still set it


def _settle_offload(resolved: ResolvedConfig, plugin: DeepSpeedPlugin) -> None:
    settings = plugin.settings
    for kind in ("optimizer", "param"):
        device = resolved.settle(
            f"zero_optimization.offload_{kind}.device", settings.get(f"offload_{kind}_device")
        )
        if f"offload_{kind}_nvme_path" in settings:
            resolved.settle(
                f"zero_optimization.offload_{kind}.nvme_path", settings[f"offload_{kind}_nvme_path"]
            )
        if device is _MISSING or str(device).lower() == "none":
            continue
        if kind == "param" and resolved.stage != 3:
            raise DeepSpeedConfigError(
                f"offloading parameters needs ZeRO stage 3, but the stage is {resolved.stage} "
                f"(offload_param_device={device!r})"
            )
        if kind == "optimizer" and resolved.stage == 0:
            raise DeepSpeedConfigError(
                f"offloading the optimizer needs ZeRO stage 1, 2 or 3, but the stage is 0 "
                f"(offload_optimizer_device={device!r})"
            )


def _settle_accumulation(
    resolved: ResolvedConfig, plugin: DeepSpeedPlugin, accumulation: Setting | None
) -> Any:
    from_plugin = plugin.settings.get("gradient_accumulation_steps")
    if (
        accumulation is not None
        and from_plugin is not None
        and not _same(accumulation.value, from_plugin.value)
    ):
        raise DeepSpeedConfigError(
            f"{accumulation.source} and {from_plugin.source} set different gradient accumulation steps; "
            "set them in one place"
        )
    return resolved.settle("gradient_accumulation_steps", accumulation or from_plugin, 1)


def _settle_precision(resolved: ResolvedConfig, requested: Setting | None) -> str:
    config = resolved.config
    if "bfloat16" in config and "bf16" not in config:  # DeepSpeed's older spelling
        config["bf16"] = config.pop("bfloat16")
    in_json = {mode: _lookup(config, f"{mode}.enabled") for mode in ("bf16", "fp16")}
    enabled = [mode for mode, value in in_json.items() if value is True]
    if len(enabled) > 1:
        raise DeepSpeedConfigError(f"{resolved.source} enables both bf16 and fp16; enable one")
    if requested is not None:
        mode = str(requested.value).lower()
        for other, value in in_json.items():
            if value is _MISSING or value == AUTO:
                continue
            if bool(value) != (mode == other):
                raise resolved.conflict(f"{other}.enabled", Setting(mode, requested.source), value)
    else:
        mode = enabled[0] if enabled else "no"
    for other in ("bf16", "fp16"):
        if other == mode or _lookup(config, f"{other}.enabled") is not _MISSING:
            _assign(config, f"{other}.enabled", other == mode)
    return mode


def fill_prepare_values(
    resolved: ResolvedConfig,
    *,
    micro_batch_size: int | None,
    world_size: int,
) -> dict[str, Any]:
    """Return the final config: batch sizes filled from the loader, leftover "auto" values removed.

    Raises DeepSpeedConfigError when the JSON's batch sizes contradict the loader or each other.
    """
    config = resolved.config
    steps = resolved.gradient_accumulation_steps
    micro = _lookup(config, "train_micro_batch_size_per_gpu")
    if micro is _MISSING or micro == AUTO:
        micro = micro_batch_size or 1
        config["train_micro_batch_size_per_gpu"] = micro
    elif micro_batch_size is not None and micro != micro_batch_size:
        raise DeepSpeedConfigError(
            f'{resolved.source} has "train_micro_batch_size_per_gpu": {micro} but the prepared data '
            f'loader gives each process batches of {micro_batch_size}; make them agree (or write "auto")'
        )
    total = _lookup(config, "train_batch_size")
    expected = int(micro) * steps * world_size
    if total is _MISSING or total == AUTO:
        config["train_batch_size"] = expected
    elif total != expected:
        raise DeepSpeedConfigError(
            f'{resolved.source} has "train_batch_size": {total}, but micro-batch {micro} x accumulation '
            f"{steps} x {world_size} processes is {expected}"
        )
    _drop_auto(config)
    return config


def _drop_auto(node: dict[str, Any]) -> None:
    for key in list(node):
        value = node[key]
        if value == AUTO:
            del node[key]
        elif isinstance(value, dict):
            _drop_auto(value)
