"""`DeepSpeedPlugin`: what a script (or `accel launch --use_deepspeed ...`) asks of DeepSpeed.

Fields a script leaves unset are taken from the launcher's environment (`--zero_stage`, the
config's `deepspeed_config:` section); a field both set differently is an error naming both (the
script cannot tell which one the user meant). Each value remembers where it came from, so that a
conflict with the user's DeepSpeed JSON can name both sides too. Importing this module imports no
deepspeed.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from accel_deepspeed.config.errors import DeepSpeedConfigError, Setting
from accel_state.environment import env_vars
from accel_state.environment.choices import DEEPSPEED_OFFLOAD_DEVICES, ZERO_STAGES
from accel_state.environment.distributed_type import DistributedType
from accel_state.environment.json_object import JsonObjectError, read_json_object

# Field -> (environment variable the launcher writes, the flag that writes it).
_FROM_LAUNCHER: dict[str, tuple[str, str]] = {
    "zero_stage": (env_vars.DEEPSPEED_ZERO_STAGE, "--zero_stage"),
    "gradient_clipping": (env_vars.GRADIENT_CLIPPING, "--gradient_clipping"),
    "offload_optimizer_device": (env_vars.DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE, "--offload_optimizer_device"),
    "offload_param_device": (env_vars.DEEPSPEED_OFFLOAD_PARAM_DEVICE, "--offload_param_device"),
    "zero3_init_flag": (env_vars.DEEPSPEED_ZERO3_INIT, "--zero3_init_flag"),
    "zero3_save_16bit_model": (env_vars.DEEPSPEED_ZERO3_SAVE_16BIT_MODEL, "--zero3_save_16bit_model"),
    "hf_ds_config": (env_vars.DEEPSPEED_CONFIG_FILE, "--deepspeed_config_file"),
}
# Boolean fields: set by the launcher only when their variable is there (unset is not "false").
_FLAGS = ("zero3_init_flag", "zero3_save_16bit_model")
_READERS: dict[str, Callable[[str], Any]] = {
    "zero_stage": env_vars.read_int,
    "gradient_clipping": env_vars.read_float,
    "offload_optimizer_device": env_vars.read_str,
    "offload_param_device": env_vars.read_str,
    "zero3_init_flag": env_vars.read_flag,
    "zero3_save_16bit_model": env_vars.read_flag,
    "hf_ds_config": env_vars.read_str,
}


@dataclass
class DeepSpeedPlugin:
    """DeepSpeed options, under Accelerate's names.

    `hf_ds_config` is your own DeepSpeed JSON (a path or a dict); its `"auto"` values are filled
    from what `prepare()` sees. Every other field left at None comes from the launcher, else from
    the JSON, else from the default (ZeRO stage 2 without a JSON, no offload, no clipping). A field
    that the launcher or the JSON sets to a different value is an error naming both, never a
    silent pick.
    """

    distributed_type: ClassVar[DistributedType] = DistributedType.DEEPSPEED

    hf_ds_config: Any = None
    gradient_accumulation_steps: int | None = None
    gradient_clipping: float | None = None
    zero_stage: int | None = None
    is_train_batch_min: bool = True
    offload_optimizer_device: str | None = None
    offload_param_device: str | None = None
    offload_optimizer_nvme_path: str | None = None
    offload_param_nvme_path: str | None = None
    zero3_init_flag: bool | None = None
    zero3_save_16bit_model: bool | None = None
    # name -> Setting(value, where it came from), for every field set by the script or the launcher.
    settings: dict[str, Setting] = field(default_factory=dict, init=False, repr=False)
    deepspeed_config: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    config_source: str | None = field(default=None, init=False, repr=False)
    # The config the run resolved (set when an Accelerator is built with this plugin).
    resolved_config: dict[str, Any] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        for name in _FROM_LAUNCHER:
            launcher = _launcher_setting(name)
            value = getattr(self, name)
            if value is None:
                if launcher is not None:
                    setattr(self, name, launcher.value)
                    self.settings[name] = launcher
                continue
            script = Setting(value, f"the script's DeepSpeedPlugin({name}={_shown(name, value)})")
            if launcher is not None and not _same_value(name, value, launcher.value):
                raise _disagreement(script, launcher)
            self.settings[name] = script
        steps = self.gradient_accumulation_steps
        if steps is not None:
            self.settings["gradient_accumulation_steps"] = Setting(
                steps, f"DeepSpeedPlugin(gradient_accumulation_steps={steps!r})"
            )
            launched = env_vars.read_int(env_vars.GRADIENT_ACCUMULATION_STEPS)
            if launched is not None and launched != steps:
                raise _disagreement(
                    Setting(steps, f"the script's DeepSpeedPlugin(gradient_accumulation_steps={steps!r})"),
                    Setting(launched, _launcher_source("--gradient_accumulation_steps",
                                                       env_vars.GRADIENT_ACCUMULATION_STEPS)),
                )  # fmt: skip
        for name in ("offload_optimizer_nvme_path", "offload_param_nvme_path"):
            if getattr(self, name) is not None:
                self.settings[name] = Setting(getattr(self, name), f"DeepSpeedPlugin({name}=...)")
        self._check_values()
        self.deepspeed_config, self.config_source = _load_user_config(self.hf_ds_config, self.settings)

    def _check_values(self) -> None:
        def refuse(name: str, problem: str) -> None:
            setting = self.settings.get(name)
            where = setting.source if setting is not None else f"DeepSpeedPlugin({name}=...)"
            raise DeepSpeedConfigError(f"{where}: {problem}")

        if self.zero_stage is not None and self.zero_stage not in ZERO_STAGES:
            refuse("zero_stage", f"the ZeRO stage must be one of {ZERO_STAGES}")
        for name in ("offload_optimizer_device", "offload_param_device"):
            value = getattr(self, name)
            if value is not None and str(value).lower() not in DEEPSPEED_OFFLOAD_DEVICES:
                refuse(name, f"the offload device must be one of {', '.join(DEEPSPEED_OFFLOAD_DEVICES)}")
        steps = self.gradient_accumulation_steps
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            refuse("gradient_accumulation_steps", "must be a positive integer")
        clip = self.gradient_clipping
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or clip < 0):
            refuse("gradient_clipping", "must be a number >= 0 (0 clips nothing)")

    # Accelerate's helpers ---------------------------------------------------------------------
    def is_zero3_init_enabled(self) -> bool:
        """True when models are to be built partitioned (ZeRO-3 with `zero3_init_flag`)."""
        return bool(self.zero3_init_flag) and self.stage == 3

    @property
    def stage(self) -> int:
        """The ZeRO stage this plugin asks for (the script's or launcher's, else the JSON's, else 2)."""
        if self.zero_stage is not None:
            return int(self.zero_stage)
        stage = self.deepspeed_config.get("zero_optimization", {}).get("stage")
        if isinstance(stage, int):
            return stage
        return 2 if self.config_source is None else 0

    def zero3_init_context_manager(self, enable: bool = False) -> Any:
        """Return the context in which models are built already partitioned (ZeRO-3), else a no-op."""
        import contextlib

        if not (enable or self.is_zero3_init_enabled()) or self.stage != 3:
            return contextlib.nullcontext()
        from accel_deepspeed.quiet_warnings import ignore_deepspeed_deprecations

        ignore_deepspeed_deprecations()
        import deepspeed

        # What zero.Init reads: the ZeRO section and the precision (the dtype parameters are built in).
        resolved = self.resolved_config or {}
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {
                k: v for k, v in resolved.get("zero_optimization", {}).items() if v != "auto"
            },
        }
        config["zero_optimization"]["stage"] = 3
        for mode in ("bf16", "fp16"):
            if isinstance(resolved.get(mode), dict) and resolved[mode].get("enabled") is True:
                config[mode] = {"enabled": True}
        return deepspeed.zero.Init(config_dict_or_path=config)


def _launcher_source(flag: str, variable: str) -> str:
    return f"the launcher's {flag} ({variable}={os.environ.get(variable)})"


def _launcher_setting(name: str) -> Setting | None:
    """Return the value `accel launch` gave field `name` (flag or config file), None if none."""
    variable, flag = _FROM_LAUNCHER[name]
    if name in _FLAGS and variable not in os.environ:
        return None
    value = _READERS[name](variable)
    return None if value is None else Setting(value, _launcher_source(flag, variable))


def _shown(name: str, value: Any) -> str:
    return "{...}" if name == "hf_ds_config" and isinstance(value, dict) else repr(value)


def _same_value(name: str, script: Any, launcher: Any) -> bool:
    """True when the script's and the launcher's value of field `name` mean the same."""
    if name == "hf_ds_config":
        if not isinstance(script, (str, os.PathLike)):
            return False  # a dict in the script, a file from the launcher: two configs
        return Path(script).expanduser().absolute() == Path(launcher).expanduser().absolute()
    if name in _FLAGS:
        return bool(script) == bool(launcher)
    if isinstance(script, str):
        return script.lower() == str(launcher).lower()
    if isinstance(script, (int, float)) and not isinstance(script, bool):
        return float(script) == float(launcher)
    return bool(script == launcher)


def _disagreement(script: Setting, launcher: Setting) -> DeepSpeedConfigError:
    return DeepSpeedConfigError(
        f"{script.source} and {launcher.source} disagree; set it in one place "
        "(drop the launch flag, or leave the field unset in the script)"
    )


def _load_user_config(source: Any, settings: dict[str, Setting]) -> tuple[dict[str, Any], str | None]:
    """Return the user's DeepSpeed JSON as a dict (deep-copied) and a name for it in messages."""
    if source is None:
        return {}, None
    if isinstance(source, dict):
        return copy.deepcopy(source), "hf_ds_config (dict)"
    if not isinstance(source, (str, os.PathLike)):
        raise DeepSpeedConfigError(
            f"DeepSpeedPlugin(hf_ds_config=...): expected a path or a dict, got {type(source).__name__}"
        )
    path = Path(source)
    origin = settings.get("hf_ds_config")
    launched = origin is not None and origin.source.startswith("the launcher's")
    where = f"{path} (from --deepspeed_config_file)" if launched else str(path)
    try:
        return read_json_object(path), str(path)
    except JsonObjectError as error:
        raise DeepSpeedConfigError(f"DeepSpeed config {where}: {error}") from None
