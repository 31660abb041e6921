"""`TorchDynamoPlugin`: how `prepare` compiles a model, with Accelerate's names and env variables.

Fields left unset are read from the `ACCEL_DYNAMO_*` variables the launcher sets (from its flags or
the config file's `dynamo_config:`), so that an argument beats a variable beats the file. The
backend "no" (the default) compiles nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from accel_state.compilation.errors import CompileConfigError
from accel_state.compilation.inductor_options import check_options
from accel_state.environment import env_vars


class DynamoBackend(str, enum.Enum):
    """The torch.compile backends Accelerate names (the value, lower-cased, is torch's name)."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    CUDAGRAPHS = "CUDAGRAPHS"
    OFI = "OFI"
    FX2TRT = "FX2TRT"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    AOT_TORCHXLA_TRACE_ONCE = "AOT_TORCHXLA_TRACE_ONCE"
    TORCHXLA_TRACE_ONCE = "TORCHXLA_TRACE_ONCE"
    IPEX = "IPEX"
    TVM = "TVM"
    HPU_BACKEND = "HPU_BACKEND"


MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def dynamo_backend_named(value: DynamoBackend | str, where: str = "dynamo_backend") -> DynamoBackend:
    """Return `value` as a DynamoBackend (any case), or raise one line naming it and the known ones."""
    if isinstance(value, DynamoBackend):
        return value
    try:
        return DynamoBackend(str(value).strip().upper())
    except ValueError:
        known = ", ".join(backend.value.lower() for backend in DynamoBackend)
        raise CompileConfigError(
            f"{where} is {value!r}, which is no torch.compile backend accel knows ({known})"
        ) from None


@dataclass
class TorchDynamoPlugin:
    """How `prepare` compiles each model (Accelerate's fields; unset ones come from `ACCEL_DYNAMO_*`)."""

    backend: DynamoBackend | str | None = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: dict[str, Any] | None = None
    disable: bool = False
    use_regional_compilation: bool | None = None
    # The block classes (names) regional compilation compiles; None: found in the model.
    regional_block_classes: list[str] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.backend is None:
            self.backend = env_vars.read_str(env_vars.DYNAMO_BACKEND, "no")
            where = f"environment variable {env_vars.DYNAMO_BACKEND}"
        else:
            where = "TorchDynamoPlugin.backend"
        self.backend = dynamo_backend_named(self.backend or "no", where)
        if self.mode is None:
            self.mode = env_vars.read_str(env_vars.DYNAMO_MODE, "default")
            where = f"environment variable {env_vars.DYNAMO_MODE}"
        else:
            where = "TorchDynamoPlugin.mode"
        _check_mode(self.mode, where)
        if self.fullgraph is None:
            self.fullgraph = env_vars.read_flag(env_vars.DYNAMO_USE_FULLGRAPH, False)
        if self.dynamic is None and env_vars.read_str(env_vars.DYNAMO_USE_DYNAMIC) is not None:
            self.dynamic = env_vars.read_flag(env_vars.DYNAMO_USE_DYNAMIC)
        if self.use_regional_compilation is None:
            self.use_regional_compilation = env_vars.read_flag(
                env_vars.DYNAMO_USE_REGIONAL_COMPILATION, False
            )
        self._check_options()

    def check(self) -> None:
        """Raise CompileConfigError naming a field set since the plugin was made that cannot compile.

        `prepare` calls it before any model is wrapped, so that a bad field is one line before the
        weights are broadcast, not a failure inside the first compile.
        """
        self.backend = dynamo_backend_named(self.backend or "no", "TorchDynamoPlugin.backend")
        _check_mode(self.mode, "TorchDynamoPlugin.mode")
        self._check_options()

    def _check_options(self) -> None:
        # Inductor's options are checked only when they will be used: a disabled plugin keeps its options.
        assert isinstance(self.backend, DynamoBackend)
        if self.options and self.enabled:
            check_options(self.backend.value.lower(), self.mode, self.options)

    @property
    def enabled(self) -> bool:
        """True when `prepare` compiles (a backend other than "no", not disabled)."""
        return self.backend is not DynamoBackend.NO and not self.disable

    def to_kwargs(self) -> dict[str, Any]:
        """Return the keyword arguments of `torch.compile` (torch's lower-case backend name)."""
        assert isinstance(self.backend, DynamoBackend)
        kwargs: dict[str, Any] = {
            "backend": self.backend.value.lower(),
            "fullgraph": bool(self.fullgraph),
            "dynamic": self.dynamic,
            "disable": self.disable,
        }
        if self.options:  # torch.compile takes options or a mode, not both
            kwargs["options"] = dict(self.options)
        else:
            kwargs["mode"] = self.mode
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as Accelerate's `to_dict` does (the backend lower-cased)."""
        assert isinstance(self.backend, DynamoBackend)
        return {
            "backend": self.backend.value.lower(),
            "mode": self.mode,
            "fullgraph": self.fullgraph,
            "dynamic": self.dynamic,
            "options": self.options,
            "disable": self.disable,
            "use_regional_compilation": self.use_regional_compilation,
        }


def _check_mode(mode: str | None, where: str) -> None:
    if mode is not None and mode not in MODES:  # None: torch.compile's default
        raise CompileConfigError(f"{where} is {mode!r}; torch.compile's modes are {', '.join(MODES)}")
