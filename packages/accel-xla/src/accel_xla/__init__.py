"""accel-xla: PyTorch/XLA (TPU, or XLA's CPU device) behind accel's Backend seam.

Importing this package imports no torch_xla: that happens when an XLA run is set up.
"""

from __future__ import annotations

from accel_xla.__about__ import __version__
from accel_xla.backend import XlaBackend, XlaConfigError
from accel_xla.padding import pad_to_multiple_of
from accel_xla.recompilation import RecompilationWarning

__all__ = ["RecompilationWarning", "XlaBackend", "XlaConfigError", "__version__", "pad_to_multiple_of"]
