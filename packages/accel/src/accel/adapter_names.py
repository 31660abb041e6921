"""Names that live in optional adapter packages (accel-deepspeed), imported on first use.

`from accel import DeepSpeedPlugin` works where accel-deepspeed is installed and otherwise says
what to install; `import accel` never imports an adapter (or its engine) by itself.
"""

# Imported by `import accel`: no `typing` (it costs more than accel itself), no importlib until asked.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Printed wherever the user is: the paths are the repository's (`accel` on PyPI is another project).
DEEPSPEED_INSTALL = (
    "from the repository root: "
    "pip install -c constraints.txt ./packages/accel-state ./packages/accel-deepspeed deepspeed==0.19.8"
)
# name -> (module, what installs it)
ADAPTER_NAMES: dict[str, tuple[str, str]] = {
    "DeepSpeedPlugin": ("accel_deepspeed", DEEPSPEED_INSTALL),
    "DummyOptim": ("accel_deepspeed", DEEPSPEED_INSTALL),
    "DummyScheduler": ("accel_deepspeed", DEEPSPEED_INSTALL),
    "DeepSpeedConfigError": ("accel_deepspeed", DEEPSPEED_INSTALL),
}


def adapter_name(name: str, importer: str) -> "Any":
    """Return `name` from its adapter; AttributeError (module `importer` has no such name) if unknown."""
    if name not in ADAPTER_NAMES:
        raise AttributeError(f"module {importer!r} has no attribute {name!r}")
    import importlib

    module, install = ADAPTER_NAMES[name]
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as error:
        if error.name != module:
            raise
        raise ImportError(
            f"{name} comes with {module.replace('_', '-')}, which is not installed; {install}"
        ) from None
