"""What one training step does, counted instead of timed: every function it calls, how often, and
the seconds spent in each (its own time), with accel's own code marked; and what accel's step adds
to the hand-written one's.

Wall-clock steps/s on a loaded machine varies by a few % between two copies of the same code, more
than a 1% target can be judged by. A step's calls do not vary. What accel adds is its own code
(every second of it) and each call the hand-written step does not make (a function called more
often, at its mean own time per call: the library functions accel's code calls, a collective it
runs). Calls accel saves (a sampler it replaces) are not credited, and the profiler slows what it
times: the seconds are an upper bound of what accel costs per step, whatever the machine does.
"""

from __future__ import annotations

import cProfile
import pstats
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ADDRESS = re.compile(r" at 0x[0-9a-f]+")  # in cProfile's names of some C functions
BUILTIN = "~"  # cProfile's file name for C functions
CALLS, OWN_S, OURS = 0, 1, 2  # the fields of a function's entry in `step_work`'s answer
LIBRARIES = re.compile(r".*/(site-packages|dist-packages|lib/python3\.[0-9]+)/")


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


def step_work(step: Callable[[], None], steps: int) -> dict[str, Any]:
    """Run `step` `steps` times under cProfile; return "functions": {name: [calls, own seconds, 1 if
    accel's code else 0]} per step, names the same across installs (no folder above the package, no
    address; the caller's own functions by file and name), and "step_s": the profiled step's
    seconds, profiling included."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(steps):
        step()
    profile.disable()
    read = pstats.Stats(profile)
    stats: dict[Any, Any] = read.stats  # type: ignore[attr-defined]
    folders = accel_folders()
    functions: dict[str, list[float]] = {}
    for (file, line, name), (_, count, own_s, _, _) in stats.items():
        ours = file.startswith(folders)
        if ours:
            where = f"accel:{Path(file).name}:{line}"
        elif LIBRARIES.match(file) or file == BUILTIN:
            where = f"{LIBRARIES.sub('', file)}:{line}"
        else:  # the loop's own code: its two sides are the same functions at other lines
            where = file
        key = f"{where}:{ADDRESS.sub('', name)}"
        entry = functions.setdefault(key, [0.0, 0.0, float(ours)])
        entry[0] += count / steps
        entry[1] += own_s / steps
    total_s: float = read.total_tt  # type: ignore[attr-defined]
    return {"functions": functions, "step_s": total_s / steps}


def added(raw: dict[str, Any], accel: dict[str, Any]) -> dict[str, Any]:
    """Return what accel's `step_work` answer adds to the hand-written one's: "seconds" (accel's own
    code, and the extra calls at their mean own time) of which "own_s" and "extra_s", "own_calls"
    (calls of accel's code), "extra_calls" (calls the hand-written step does not make) and
    "raw_calls" (all the hand-written step's calls), and "largest": the extra calls that take the
    most, as [name, calls, seconds]."""
    own_calls = extra_calls = own_s = extra_s = 0.0
    largest: list[Any] = ["", 0.0, 0.0]
    theirs = raw["functions"]
    for name, entry in accel["functions"].items():
        calls, seconds = entry[CALLS], entry[OWN_S]
        if entry[OURS]:
            own_calls, own_s = own_calls + calls, own_s + seconds
            continue
        extra = calls - (theirs[name][CALLS] if name in theirs else 0.0)
        if extra > 0:
            extra_calls, extra_s = extra_calls + extra, extra_s + seconds * extra / calls
            if seconds * extra / calls > largest[2]:
                largest = [name, extra, seconds * extra / calls]
    raw_calls = sum(entry[CALLS] for entry in theirs.values())
    return {"seconds": own_s + extra_s, "own_s": own_s, "extra_s": extra_s, "own_calls": own_calls,
            "extra_calls": extra_calls, "raw_calls": raw_calls, "largest": largest}  # fmt: skip
