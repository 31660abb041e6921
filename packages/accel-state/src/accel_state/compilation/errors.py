"""The error of a compile option accel cannot use, below the modules that raise it."""

from __future__ import annotations


class CompileConfigError(ValueError):
    """A torch.compile option accel cannot use (an unknown backend, mode or inductor option)."""
