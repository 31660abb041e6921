"""The kinds of distributed set-up a script can run under."""

from __future__ import annotations

import enum


class DistributedType(str, enum.Enum):
    """How the processes of a job are connected; Accelerate's names and values."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    DEEPSPEED = "DEEPSPEED"
    XLA = "XLA"

    def __str__(self) -> str:
        return self.value
