"""What one training step does, counted instead of timed: the Python calls it makes and the seconds
spent in accel's own code.

Wall-clock steps/s on a loaded machine varies by a few % between two copies of the same code, more
than a 1% target can be judged by. A step's work does not vary: run under `cProfile`, a hand-written
step and accel's step of the same composition make the same torch calls, and accel's step adds only
its wrappers' calls. The seconds spent in those (their own time, and the C functions they call
directly) bound what accel can cost per step whatever the machine does, and the calls outside accel
show that the torch work is the same.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUILTIN = "~"  # cProfile's file name for C functions


def accel_folders() -> tuple[str, ...]:
    """Return the folders of accel's imported packages (accel, accel_state, ...; not accelerate)."""
    folders = []
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        if "." in name or not top.startswith("accel_") and top != "accel":
            continue
        location = getattr(module, "__file__", None)
        if location:
            folders.append(str(Path(location).parent) + "/")
    return tuple(sorted(folders))


def step_work(step: Callable[[], None], steps: int) -> dict[str, float]:
    """Run `step` `steps` times under cProfile; return per step: "calls" (all Python and C calls),
    "accel_calls" (those in accel's code), "accel_s" (seconds in accel's code and the C functions
    it calls directly) and "step_s" (the profiled step, profiling included)."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(steps):
        step()
    profile.disable()
    read = pstats.Stats(profile)
    stats: dict[Any, Any] = read.stats  # type: ignore[attr-defined]
    folders = accel_folders()

    def ours(function: tuple[str, int, str]) -> bool:
        return function[0].startswith(folders)

    calls = accel_calls = 0
    accel_s = 0.0
    for function, (_, count, own_s, _, callers) in stats.items():
        calls += count
        if ours(function):
            accel_calls += count
            accel_s += own_s
        elif function[0] == BUILTIN:  # its time under each caller: (calls, count, own, total)
            accel_s += sum(entry[2] for caller, entry in callers.items() if ours(caller))
    total_s: float = read.total_tt  # type: ignore[attr-defined]
    return {
        "calls": calls / steps,
        "accel_calls": accel_calls / steps,
        "accel_s": accel_s / steps,
        "step_s": total_s / steps,
    }
