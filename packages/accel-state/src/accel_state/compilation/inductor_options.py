"""Inductor's options, checked and merged with the mode before torch.compile sees them.

torch.compile refuses a misspelt option with a list of all of inductor's (hundreds), refuses a
mode beside options, and takes a graph pass that is not callable until the first forward, where
the compiler fails deep in a trace. Here each is one line, when the plugin is made, that names the
option. Given a mode and options, inductor gets the mode's options under the given ones (what the
two mean together), where torch.compile would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel_state.compilation.errors import CompileConfigError

WHERE = "TorchDynamoPlugin.options"


def check_options(backend: str, mode: str | None, options: Mapping[str, Any]) -> None:
    """Raise CompileConfigError naming the first of `options` that `backend` cannot take.

    Inductor's: one it does not have, or one of the wrong type (a graph pass that is neither
    callable nor None included). Another backend's: any, beside a mode other than the default.
    """
    if backend != "inductor":
        if mode not in (None, "default"):
            raise CompileConfigError(
                f"TorchDynamoPlugin sets mode {mode!r} and options; torch.compile takes one or the other "
                f"for backend {backend!r} (only inductor's options can take a mode's)"
            )
        return
    from torch._inductor import config

    known = config.get_config_copy()
    for key, value in options.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise CompileConfigError(
                f"{WHERE} has {key!r}, which is no inductor option (torch._inductor.list_options() "
                "lists them)"
            )
        _check_type(key, name, value, config.get_type(name), known[name])  # type: ignore[attr-defined]


def with_mode_options(options: Mapping[str, Any], mode: str | None, dynamic: bool | None) -> dict[str, Any]:
    """Return inductor's `options` over the options of `mode` (none for the default mode)."""
    merged: dict[str, Any] = {}
    if mode not in (None, "default"):
        from torch._inductor import list_mode_options

        merged.update(list_mode_options(mode, dynamic))
    merged.update(options)
    return merged


def _check_type(key: str, name: str, value: Any, kind: Any, default: Any) -> None:
    if "custom" in name and name.endswith("_pass"):  # joint_custom_post_pass and its kin
        passes = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
        if not all(callable(one) for one in passes):
            raise CompileConfigError(
                f"{WHERE}[{key!r}] is a {type(value).__name__}: inductor calls it on each graph, so it "
                "is a callable (a torch._inductor.custom_graph_pass.CustomGraphPass), a list of them, or None"
            )
        return
    if isinstance(kind, type) and not isinstance(value, kind):  # a plain class: torch's own check
        raise CompileConfigError(
            f"{WHERE}[{key!r}] is a {type(value).__name__}; inductor's {name} is a {type(default).__name__}"
        )
