"""The one exception class of accel-big-modeling: bad input, named in one line."""

from __future__ import annotations


class BigModelingError(ValueError):
    """A device map, memory budget, checkpoint or offload folder that cannot be used as given.

    A `ValueError`, as Accelerate raises for the same inputs, so existing `except ValueError` keeps working.
    """
