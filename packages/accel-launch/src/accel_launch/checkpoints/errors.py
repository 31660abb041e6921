"""The one error of `accel merge-weights`, below its modules so each can raise it."""

from __future__ import annotations


class MergeError(ValueError):
    """A checkpoint that cannot be read or an output that cannot be written; the message names which file."""
