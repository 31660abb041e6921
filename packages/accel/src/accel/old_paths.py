"""The module paths of accel's first, flat layout, still importable at their new homes.

`import accel.checkpoint_errors` gives the module `accel.checkpointing.errors` itself (one module,
one identity: its classes are the same objects), with a DeprecationWarning naming the new path.
`import accel` installs a finder that answers for these names only, so no other import pays for it.
"""

import sys

# Imported by `import accel`: no `typing` (it costs more than accel itself); type checkers read
# this name as True.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

# Old path -> new path. Entries go away in accel 0.2.
MOVED: dict[str, str] = {
    "accel.checkpoint_digests": "accel.checkpointing.digests",
    "accel.checkpoint_errors": "accel.checkpointing.errors",
    "accel.checkpoint_fit": "accel.checkpointing.fit",
    "accel.checkpoint_folder": "accel.checkpointing.folder",
    "accel.checkpoint_format": "accel.checkpointing.format",
    "accel.checkpoint_layout": "accel.checkpointing.layout",
    "accel.checkpoint_lock": "accel.checkpointing.lock",
    "accel.checkpoint_naming": "accel.checkpointing.naming",
    "accel.checkpoint_reader": "accel.checkpointing.reader",
    "accel.checkpoint_registry": "accel.checkpointing.registry",
    "accel.checkpoint_restore": "accel.checkpointing.restore",
    "accel.checkpoint_rng": "accel.checkpointing.rng",
    "accel.checkpoint_target": "accel.checkpointing.target",
    "accel.checkpoint_writer": "accel.checkpointing.writer",
    "accel.content_digest": "accel.checkpointing.content_digest",
    "accel.content_digest_v1": "accel.checkpointing.content_digest_v1",
    "accel.weight_files": "accel.checkpointing.weight_files",
    "accel.dataloader_config": "accel.options.dataloader_config",
    "accel.explicit_options": "accel.options.explicit",
    "accel.gradient_accumulation": "accel.options.accumulation",
    "accel.handler_options": "accel.options.handlers",
    "accel.kwargs_handlers": "accel.options.kwargs_handlers",
    "accel.project_config": "accel.options.project_config",
    "accel.experiment_tracking": "accel.tracking.methods",
    "accel.tracker_adapters": "accel.tracking.adapters",
    "accel.tracker_base": "accel.tracking.base",
    "accel.metrics": "accel.training.metrics",
    "accel.object_kinds": "accel.training.object_kinds",
    "accel.process_control": "accel.training.process_control",
    "accel.profiling": "accel.training.profiling",
    "accel.training_triggers": "accel.training.triggers",
}


def _importer_stacklevel() -> int:
    """Return the stacklevel of the frame that imported the old path (the first one outside the
    import machinery and this module), so that the warning names the user's line. `warnings`
    does not count the frames of importlib's bootstrap, so neither does this."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and (
        frame.f_code.co_filename.startswith("<frozen importlib")
        or frame.f_globals.get("__name__") in (__name__, "importlib")
    ):
        frame = frame.f_back
        if not frame.f_code.co_filename.startswith("<frozen importlib"):
            level += 1
    return level


class MovedModules:
    """The meta-path finder of the old paths of `MOVED`, and their loader: it hands back the
    module at the new path (created there, executed once)."""

    @classmethod
    def find_spec(cls, name: str, path: "Any" = None, target: "Any" = None) -> "ModuleSpec | None":
        """Return a spec loading the new module for an old path; None for every other name."""
        if name not in MOVED:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(name, cls)  # type: ignore[arg-type]  # a loader by its two methods

    @staticmethod
    def create_module(spec: "ModuleSpec") -> "ModuleType":
        """Return the module at the new path, warning that the old one is deprecated."""
        import importlib
        import warnings

        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}: import it from there (the old path goes away in accel 0.2)",
            DeprecationWarning,
            stacklevel=_importer_stacklevel(),
        )
        return importlib.import_module(new)

    @staticmethod
    def exec_module(module: "ModuleType") -> None:
        """Nothing to run: the module was executed at its new home."""


def install() -> None:
    """Put the finder on `sys.meta_path` (once)."""
    if MovedModules not in sys.meta_path:
        sys.meta_path.append(MovedModules)
