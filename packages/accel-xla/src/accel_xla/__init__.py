"""accel-xla: PyTorch/XLA (TPU, or XLA's CPU device) behind accel's Backend seam.

Importing this package imports no torch_xla (that happens when an XLA run is set up) and no
torch: its names are imported on first use (PEP 562), so that the launcher can read its launch
hook (`accel_xla.launch.hook`) for `accel --help`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel_state.lazy_exports import lazy_attribute, lazy_dir
from accel_xla.__about__ import __version__

if TYPE_CHECKING:
    from accel_xla.backend import XlaBackend, XlaConfigError
    from accel_xla.data.padding import pad_to_multiple_of
    from accel_xla.engine.recompilation import RecompilationWarning

_HOMES = {
    "RecompilationWarning": ".engine.recompilation",
    "XlaBackend": ".backend",
    "XlaConfigError": ".backend",
    "pad_to_multiple_of": ".data.padding",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)


def __dir__() -> list[str]:
    return lazy_dir(__name__, _HOMES)


__all__ = ["RecompilationWarning", "XlaBackend", "XlaConfigError", "__version__", "pad_to_multiple_of"]
