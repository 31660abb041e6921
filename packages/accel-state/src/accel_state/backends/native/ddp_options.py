"""`DdpOptions`: how the native backend wraps each model in DistributedDataParallel.

The facade builds it from `DistributedDataParallelKwargs` (or `Accelerator(ddp_kwargs=...)`) and
hands it over among `BackendOptions.engine_options`, which the seam passes on without knowing its
type; only this backend reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accel_state.backends.native.ddp_comm_hooks import CommHookOptions


@dataclass(frozen=True)
class DdpOptions:
    """DistributedDataParallel's keyword arguments and the communication hook registered on it."""

    kwargs: Mapping[str, Any] = field(default_factory=dict)
    comm_hook: CommHookOptions = field(default_factory=CommHookOptions)
