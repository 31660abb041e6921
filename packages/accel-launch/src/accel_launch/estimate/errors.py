"""The one error of `accel estimate-memory`, below its modules so each can raise it."""

from __future__ import annotations


class EstimateError(ValueError):
    """A model that cannot be built or a dtype that cannot be counted; the message names which."""
