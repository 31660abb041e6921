"""`FullyShardedDataParallelPlugin`: what a script (or `accel launch --use_fsdp ...`) asks of FSDP.

Accelerate's name and the fields that matter for FSDP2 (`torch.distributed.fsdp.fully_shard`). A
field a script leaves at None is taken from the launcher's environment (`--fsdp_*` flags, the
config's `fsdp_config:` section), else its default. A bad value is one error naming the field, where
it came from and the value. FSDP1 (the `FullyShardedDataParallel` wrapper class) is not supported,
but Accelerate's FSDP1-era arguments are accepted and mapped onto FSDP2 (`fsdp1_options`).
Importing this module imports no torch (an FSDP1 `MixedPrecision` given to it is translated with torch).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from accel_state.backends.fsdp import fsdp1_options
from accel_state.environment import env_vars
from accel_state.environment.choices import FSDP_AUTO_WRAP_POLICIES, FSDP_STATE_DICT_TYPES, FSDP_VERSIONS
from accel_state.environment.distributed_type import DistributedType

TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP = FSDP_AUTO_WRAP_POLICIES
SHARDED_STATE_DICT, FULL_STATE_DICT = FSDP_STATE_DICT_TYPES
DEFAULT_MIN_NUM_PARAMS = 100_000_000  # Accelerate's default for SIZE_BASED_WRAP

# Field -> (environment variable the launcher writes, the flag that writes it).
_FROM_LAUNCHER: dict[str, tuple[str, str]] = {
    "fsdp_version": (env_vars.FSDP_VERSION, "--fsdp_version"),
    "auto_wrap_policy": (env_vars.FSDP_AUTO_WRAP_POLICY, "--fsdp_auto_wrap_policy"),
    "transformer_cls_names_to_wrap": (
        env_vars.FSDP_TRANSFORMER_CLS_TO_WRAP,
        "--fsdp_transformer_layer_cls_to_wrap",
    ),
    "min_num_params": (env_vars.FSDP_MIN_NUM_PARAMS, "--fsdp_min_num_params"),
    "reshard_after_forward": (env_vars.FSDP_RESHARD_AFTER_FORWARD, "--fsdp_reshard_after_forward"),
    "state_dict_type": (env_vars.FSDP_STATE_DICT_TYPE, "--fsdp_state_dict_type"),
    "cpu_ram_efficient_loading": (
        env_vars.FSDP_CPU_RAM_EFFICIENT_LOADING,
        "--fsdp_cpu_ram_efficient_loading",
    ),
    "activation_checkpointing": (env_vars.FSDP_ACTIVATION_CHECKPOINTING, "--fsdp_activation_checkpointing"),
    "cpu_offload": (env_vars.FSDP_OFFLOAD_PARAMS, "--fsdp_offload_params"),
    "sharding_strategy": (env_vars.FSDP_SHARDING_STRATEGY, "--fsdp_sharding_strategy"),
}
_FLAGS = ("reshard_after_forward", "cpu_ram_efficient_loading", "activation_checkpointing", "cpu_offload")
# FSDP1's flags, accepted without effect (accel_state.backends.fsdp.fsdp1_options says why); still checked.
_FSDP1_FLAGS = ("forward_prefetch", "limit_all_gathers", "use_orig_params", "sync_module_states")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class FsdpConfigError(ValueError):
    """An FSDP option has a value FSDP2 cannot run with; the message names the field and value."""


@dataclass
class FullyShardedDataParallelPlugin:
    """FSDP2 options, under Accelerate's names.

    `auto_wrap_policy`: "TRANSFORMER_BASED_WRAP" (shard each submodule whose class name is in
    `transformer_cls_names_to_wrap`, a list or a comma-separated string), "SIZE_BASED_WRAP" (each
    submodule with more than `min_num_params` parameters), "NO_WRAP" (the root only), or a callable
    that takes a submodule and returns whether to shard it separately (an FSDP1 policy such as
    `functools.partial(transformer_auto_wrap_policy, ...)` works too). The root is always sharded.
    `mixed_precision_policy` (a `torch.distributed.fsdp.MixedPrecisionPolicy`) replaces the one the
    run's `mixed_precision` implies; FSDP1's `MixedPrecision` or a dict of dtypes is translated to
    one. `cpu_offload` (also `offload_params`) needs a GPU run.

    FSDP1's arguments (`sharding_strategy`, `state_dict_config`, `optim_state_dict_config`,
    `backward_prefetch`, `forward_prefetch`, `limit_all_gathers`, `use_orig_params`,
    `sync_module_states`, `param_init_fn`, `ignored_modules`) are accepted: mapped onto FSDP2 where
    they change what it does, accepted without effect where FSDP2 already does what they ask
    (`accel_state.backends.fsdp.fsdp1_options` says which and why).
    """

    distributed_type: ClassVar[DistributedType] = DistributedType.FSDP

    fsdp_version: int | None = None
    auto_wrap_policy: str | Callable[..., Any] | None = None
    transformer_cls_names_to_wrap: list[str] | str | None = None
    min_num_params: int | None = None
    reshard_after_forward: bool | None = None
    state_dict_type: str | None = None
    cpu_ram_efficient_loading: bool | None = None
    activation_checkpointing: bool | None = None
    cpu_offload: bool | None = None
    mixed_precision_policy: Any = None
    # FSDP1's arguments (accel_state.backends.fsdp.fsdp1_options says what each becomes).
    sharding_strategy: Any = None
    backward_prefetch: Any = None
    forward_prefetch: bool | None = None
    limit_all_gathers: bool | None = None
    use_orig_params: bool | None = None
    sync_module_states: bool | None = None
    param_init_fn: Callable[..., Any] | None = None
    ignored_modules: Any = None
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    # Where a full state dict is gathered: on the CPU, on the main process only (state_dict_config's
    # offload_to_cpu and rank0_only; optim_state_dict_config's for the optimizers).
    state_dict_offload_to_cpu: bool = field(default=True, init=False)
    state_dict_rank0_only: bool = field(default=True, init=False)
    optim_state_dict_offload_to_cpu: bool = field(default=True, init=False)
    optim_state_dict_rank0_only: bool = field(default=True, init=False)
    # name -> where its value came from ("FullyShardedDataParallelPlugin(...)" or the launcher's flag).
    sources: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for name, (variable, flag) in _FROM_LAUNCHER.items():
            if getattr(self, name) is not None:
                self.sources[name] = f"FullyShardedDataParallelPlugin({name}=...)"
                continue
            raw = env_vars.read_str(variable)
            if raw is not None:
                self.sources[name] = f"{flag} ({variable}={os.environ.get(variable)})"
                setattr(self, name, raw)
        self._normalise()

    @property
    def offload_params(self) -> bool:
        """Accelerate's launcher name for `cpu_offload`."""
        return bool(self.cpu_offload)

    def _refuse(self, name: str, problem: str) -> FsdpConfigError:
        where = self.sources.get(name, f"FullyShardedDataParallelPlugin({name}=...)")
        return FsdpConfigError(f"{where}: {getattr(self, name)!r} {problem}")

    def _normalise(self) -> None:
        version = self.fsdp_version if self.fsdp_version is not None else 2
        if str(version).strip() == "1":
            raise FsdpConfigError(
                f"{self.sources.get('fsdp_version', 'fsdp_version')}: FSDP1 (the FullyShardedDataParallel "
                "wrapper) is not supported; use fsdp_version=2 (fully_shard), the default, which takes "
                "FSDP1's options (sharding_strategy, state_dict_config, ...) too"
            )
        if str(version).strip() not in {str(v) for v in FSDP_VERSIONS}:
            raise self._refuse("fsdp_version", "is not an FSDP version; the only one supported is 2")
        self.fsdp_version = 2
        self._normalise_sharding_strategy()
        for name in (*_FLAGS, *_FSDP1_FLAGS):
            self._normalise_flag(name)
        if self.reshard_after_forward is None:
            self.reshard_after_forward = True
        self._normalise_wrap_policy()
        self._normalise_state_dict_configs()
        self._normalise_state_dict_type()
        self._normalise_fsdp1_extras()

    def _given(self, name: str) -> bool:
        """Whether the script passed `name` itself (not the launcher)."""
        return self.sources.get(name, "").startswith("FullyShardedDataParallelPlugin(")

    def _normalise_sharding_strategy(self) -> None:
        # Accelerate's FSDP1 plugin took a strategy in reshard_after_forward too.
        value: Any = self.reshard_after_forward
        if self.sharding_strategy is None and value is not None and not isinstance(value, bool):
            word = str(getattr(value, "name", value)).strip().upper().lstrip("_")
            if word in fsdp1_options.SHARDING_STRATEGIES:
                self.sharding_strategy, self.reshard_after_forward = word, None
                self.sources["sharding_strategy"] = self.sources.pop("reshard_after_forward", "")
        if self.sharding_strategy is None:
            return
        try:
            self.sharding_strategy = fsdp1_options.sharding_strategy_name(self.sharding_strategy)
        except fsdp1_options.Fsdp1OptionError as error:
            raise self._refuse("sharding_strategy", str(error)) from None
        implied = fsdp1_options.RESHARD_AFTER_FORWARD[self.sharding_strategy]
        self._normalise_flag("reshard_after_forward")
        given = self.reshard_after_forward
        if self._given("reshard_after_forward") and given is not None and given != implied:
            raise FsdpConfigError(
                f"FullyShardedDataParallelPlugin: sharding_strategy={self.sharding_strategy} means "
                f"reshard_after_forward={implied}, but reshard_after_forward={self.reshard_after_forward} "
                "was passed too; give one of them"
            )
        self.reshard_after_forward = implied

    def _normalise_state_dict_configs(self) -> None:
        kinds = {}
        for name, optimizer in (("state_dict_config", False), ("optim_state_dict_config", True)):
            config = getattr(self, name)
            if config is None:
                continue
            try:
                kind, offload, rank0_only = fsdp1_options.state_dict_config_kind(config, optimizer)
            except fsdp1_options.Fsdp1OptionError as error:
                raise FsdpConfigError(
                    f"FullyShardedDataParallelPlugin({name}=...): {type(config).__name__} {error}"
                ) from None
            kinds[name] = kind
            prefix = "optim_state_dict" if optimizer else "state_dict"
            setattr(self, f"{prefix}_offload_to_cpu", offload)
            setattr(self, f"{prefix}_rank0_only", rank0_only)
        if len(set(kinds.values())) > 1:
            raise FsdpConfigError(
                "FullyShardedDataParallelPlugin: state_dict_config is "
                f"{type(self.state_dict_config).__name__} but optim_state_dict_config is "
                f"{type(self.optim_state_dict_config).__name__}; both must be Full or both Sharded"
            )
        if not kinds:
            return
        kind = next(iter(kinds.values()))
        given = self.state_dict_type
        if given is not None and self._given("state_dict_type"):
            word = str(getattr(given, "name", given)).strip().upper()
            if word != kind:
                name = next(iter(kinds))
                raise FsdpConfigError(
                    f"FullyShardedDataParallelPlugin: state_dict_type={word} but {name} is "
                    f"{type(getattr(self, name)).__name__} ({kind}); give matching ones"
                )
        # The script's config beats the launcher's --fsdp_state_dict_type.
        self.state_dict_type = kind
        self.sources["state_dict_type"] = f"FullyShardedDataParallelPlugin({next(iter(kinds))}=...)"

    def _normalise_fsdp1_extras(self) -> None:
        if self.backward_prefetch is not None:
            try:
                self.backward_prefetch = fsdp1_options.backward_prefetch_name(self.backward_prefetch)
            except fsdp1_options.Fsdp1OptionError as error:
                raise self._refuse("backward_prefetch", str(error)) from None
        if self.param_init_fn is not None and not callable(self.param_init_fn):
            raise self._refuse("param_init_fn", "is not callable")
        ignored = self.ignored_modules
        if ignored is not None and not isinstance(ignored, str):
            try:
                ignored = list(ignored)
            except TypeError:
                raise self._refuse(
                    "ignored_modules", "is neither modules nor a regex of module names"
                ) from None
            if not all(hasattr(m, "parameters") for m in ignored):
                raise self._refuse("ignored_modules", "holds something that is not a torch module")
            self.ignored_modules = ignored
        if self.mixed_precision_policy is not None:
            try:
                self.mixed_precision_policy = fsdp1_options.fsdp2_mixed_precision(self.mixed_precision_policy)
            except fsdp1_options.Fsdp1OptionError as error:
                raise self._refuse("mixed_precision_policy", str(error)) from None

    def _normalise_flag(self, name: str) -> None:
        value = getattr(self, name)
        if value is None or isinstance(value, bool):
            return
        word = str(value).strip().lower()
        if word in _TRUE:
            setattr(self, name, True)
        elif word in _FALSE:
            setattr(self, name, False)
        else:
            raise self._refuse(name, "is not a boolean (true or false)")

    def _normalise_wrap_policy(self) -> None:
        names = self.transformer_cls_names_to_wrap
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        if names is not None and not all(isinstance(n, str) and n for n in names):
            raise self._refuse("transformer_cls_names_to_wrap", "is not a list of class names")
        self.transformer_cls_names_to_wrap = names
        if self.min_num_params is not None:
            try:
                count = int(str(self.min_num_params).strip())
            except ValueError:
                raise self._refuse("min_num_params", "is not an integer") from None
            if count < 0:
                raise self._refuse("min_num_params", "must be >= 0")
            self.min_num_params = count
        policy = self.auto_wrap_policy
        if policy is None:
            # Accelerate: class names given mean a transformer-based policy, else none.
            self.auto_wrap_policy = TRANSFORMER_BASED_WRAP if names else NO_WRAP
        elif isinstance(policy, str):
            word = policy.strip().upper()
            if word not in FSDP_AUTO_WRAP_POLICIES:
                raise self._refuse(
                    "auto_wrap_policy",
                    f"is not an auto-wrap policy; choose one of {', '.join(FSDP_AUTO_WRAP_POLICIES)}",
                )
            self.auto_wrap_policy = word
        elif not callable(policy):
            raise self._refuse("auto_wrap_policy", "is neither a policy name nor a callable")
        if self.auto_wrap_policy == TRANSFORMER_BASED_WRAP and not names:
            raise self._refuse(
                "auto_wrap_policy",
                "needs transformer_cls_names_to_wrap (--fsdp_transformer_layer_cls_to_wrap): "
                "the class names of the layers to shard",
            )
        if self.auto_wrap_policy == SIZE_BASED_WRAP and self.min_num_params is None:
            self.min_num_params = DEFAULT_MIN_NUM_PARAMS

    def _normalise_state_dict_type(self) -> None:
        value = self.state_dict_type
        if value is None:
            self.state_dict_type = SHARDED_STATE_DICT  # Accelerate's default for FSDP2
            return
        word = str(getattr(value, "name", value)).strip().upper()
        if word not in FSDP_STATE_DICT_TYPES:
            raise self._refuse(
                "state_dict_type",
                f"is not a state dict type FSDP2 saves; choose one of {', '.join(FSDP_STATE_DICT_TYPES)}",
            )
        self.state_dict_type = word

    def set_state_dict_type(self, state_dict_type: str | None = None) -> None:
        """Set how save_state writes models and optimizers (Accelerate's method)."""
        self.state_dict_type = state_dict_type
        self.sources["state_dict_type"] = f"set_state_dict_type({state_dict_type!r})"
        self._normalise_state_dict_type()
