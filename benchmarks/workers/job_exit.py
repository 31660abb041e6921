"""How a benchmark job ends: raw and Accelerate jobs leave the process group by hand and exit at once.

A gloo group still alive when the interpreter finalizes can abort the process after all of its
work ("terminate called without an active exception"), which would lose a run's answer. accel
tears itself down at exit (what it is measured with); the others are ended here, once their answer
is printed.
"""

from __future__ import annotations

import os
import sys


def end_job(contender: str) -> None:
    """End this rank of `contender`'s job (accel's: nothing to do, its exit teardown runs)."""
    if contender == "accel":
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
