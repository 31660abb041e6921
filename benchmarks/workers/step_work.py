"""What one training step does, counted instead of timed: every function it calls, how often, and
the seconds spent in each (its own time), with accel's own code marked; and what accel's step adds
to the hand-written one's.

Wall-clock steps/s on a loaded machine varies by a few % between two copies of the same code, more
than a 1% target can be judged by. A step's calls do not vary. What accel adds is its own code
(every second of it) and each call the hand-written step does not make (a function called more
often, at its mean own time per call: the library functions accel's code calls, a collective it
runs; but never more than accel's side spent in that function beyond the hand-written side, so that
a call the loop makes on both sides and that costs nothing on accel's, the loop's `.float()` of an
output accel already cast, is not charged at the mean of real conversions). The loop's own lines
are counted on both sides and their difference charged (or credited): what the hand-written loop
does in its lines (dividing the loss over an accumulation window, choosing no_sync) moves into
accel's code through accel, and is not added work. Calls accel saves (a sampler it replaces) are
not credited, and the profiler slows what it times: the seconds are an upper bound of what accel
costs per step, whatever the machine does.
"""

from __future__ import annotations

import cProfile
import pstats
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ADDRESS = re.compile(r" at 0x[0-9a-f]+")  # in cProfile's names of some C functions
BUILTIN = "~"  # cProfile's file name for C functions
# The fields of a function's entry in `step_work`'s answer: its calls, own seconds, 1 if accel's
# code, the calls it makes, and 1 if the loop's own code (neither accel's nor a library's).
CALLS, OWN_S, OURS, MAKES, LOOP = 0, 1, 2, 3, 4
CALIBRATION_CALLS, CALIBRATION_TRIES = 20_000, 3
LIBRARIES = re.compile(r".*/(site-packages|dist-packages|lib/python3\.[0-9]+)/")
# A collective's C functions (the call and the wait on its Work): their own time holds the wait for
# a peer that arrives later.
COLLECTIVE = re.compile(r"torch\._C\._distributed_c10d\.")


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
    accel's code else 0, calls it makes]} per step, names the same across installs (no folder above
    the package, no address; the caller's own functions by file and name), "step_s": the profiled
    step's seconds, profiling included, and "profiler_s": what the profiler itself adds to each
    call, to the callee and to its caller (`profiler_cost`)."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(steps):
        step()
    profile.disable()
    read = pstats.Stats(profile)
    stats: dict[Any, Any] = read.stats  # type: ignore[attr-defined]
    folders = accel_folders()
    names = {function: _name(function, folders) for function in stats}
    functions: dict[str, list[float]] = {}

    def entry_of(function: tuple[str, int, str]) -> list[float]:
        file = function[0]
        ours, loops = file.startswith(folders), not (file.startswith(folders) or _library(file))
        return functions.setdefault(names[function], [0.0, 0.0, float(ours), 0.0, float(loops)])

    for function, (_, count, own_s, _, callers) in stats.items():
        entry = entry_of(function)
        entry[CALLS] += count / steps
        entry[OWN_S] += own_s / steps
        for caller, (_, calls, *_) in callers.items():
            if caller in names:  # not the profiler's own enable/disable
                entry_of(caller)[MAKES] += calls / steps
    total_s: float = read.total_tt  # type: ignore[attr-defined]
    return {"functions": functions, "step_s": total_s / steps, "profiler_s": profiler_cost()}


def least_waiting(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the first rank's `step_work` answer with each collective's own seconds taken on the
    rank where they are least. The last rank to reach a collective waits for no one: what the
    others wait is that rank's lag, which a loop pays at its next collective whoever runs it (the
    hand-written one inside backward's gradient exchange, where it is not an extra call), so it is
    not the collective's cost."""
    first = answers[0]
    functions = {name: list(entry) for name, entry in first["functions"].items()}
    for name, entry in functions.items():
        if not COLLECTIVE.search(name):
            continue
        for other in answers[1:]:
            theirs = other["functions"].get(name)
            if theirs is not None and theirs[CALLS] == entry[CALLS]:
                entry[OWN_S] = min(entry[OWN_S], theirs[OWN_S])
    return {**first, "functions": functions}


def _library(file: str) -> bool:
    """Whether `file` is a library's, Python's (a frozen module too) or a C function's, not the loop's."""
    return bool(LIBRARIES.match(file)) or file == BUILTIN or file.startswith("<")


def _name(function: tuple[str, int, str], folders: tuple[str, ...]) -> str:
    file, line, name = function
    if file.startswith(folders):
        where = f"accel:{Path(file).name}:{line}"
    elif _library(file):
        where = f"{LIBRARIES.sub('', file)}:{line}"
    else:  # the loop's own code: its two sides are the same functions at other lines
        where = file
    return f"{where}:{ADDRESS.sub('', name)}"


def _empty() -> None:
    pass


def _calling(count: int) -> None:
    for _ in range(count):
        _empty()


def profiler_cost() -> list[float]:
    """Return the seconds cProfile adds to each call on this machine, [to the callee's own time, to
    the caller's]: an empty function called CALIBRATION_CALLS times, profiled and not, the least of
    CALIBRATION_TRIES tries (what is taken off is never more than the profiler adds)."""
    callee = caller = float("inf")
    for _ in range(CALIBRATION_TRIES):
        started = time.perf_counter()
        _calling(CALIBRATION_CALLS)
        plain_s = time.perf_counter() - started
        profile = cProfile.Profile()
        profile.enable()
        _calling(CALIBRATION_CALLS)
        profile.disable()
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        own = {name: own_s for (_, _, name), (_, _, own_s, _, _) in stats.items()}
        callee = min(callee, own[_empty.__name__] / CALIBRATION_CALLS)
        caller = min(caller, max(0.0, own[_calling.__name__] - plain_s) / CALIBRATION_CALLS)
    return [callee, caller]


def _cost(entry: list[float], profiler_s: list[float]) -> float:
    """Return a function's own seconds less what the profiler added to its calls and theirs."""
    return max(0.0, entry[OWN_S] - entry[CALLS] * profiler_s[0] - entry[MAKES] * profiler_s[1])


def _loop_s(answer: dict[str, Any]) -> float:
    """Return the own seconds of the loop's own code in a `step_work` answer (0 for answers that do
    not mark it)."""
    return sum(_cost(entry, answer["profiler_s"]) for entry in answer["functions"].values()
               if len(entry) > LOOP and entry[LOOP])  # fmt: skip


def added(raw: dict[str, Any], accel: dict[str, Any]) -> dict[str, Any]:
    """Return what accel's `step_work` answer adds to the hand-written one's: "seconds" (accel's own
    code, and the extra calls at their mean own time but at most the time spent in their function
    beyond the hand-written side's, less what the profiler adds to each call, and "loop_s") of
    which "own_s" and "extra_s", "loop_s" (the loop's own lines through accel less the hand-written
    loop's: work the hand-written loop does in its lines, dividing the loss or choosing no_sync,
    moves into accel's code and is not added; more lines through accel would be), "own_calls"
    (calls of accel's code), "extra_calls" (calls the hand-written step does not make) and
    "raw_calls" (all the hand-written step's calls), and "largest": the extra calls that take the
    most, as [name, calls, seconds]."""
    own_calls = extra_calls = own_s = extra_s = 0.0
    largest: list[Any] = ["", 0.0, 0.0]
    theirs = raw["functions"]
    for name, entry in accel["functions"].items():
        calls, seconds = entry[CALLS], _cost(entry, accel["profiler_s"])
        if entry[OURS]:
            own_calls, own_s = own_calls + calls, own_s + seconds
            continue
        if len(entry) > LOOP and entry[LOOP]:
            continue  # the loop's own lines: counted as a whole, against the hand-written loop's
        extra = calls - (theirs[name][CALLS] if name in theirs else 0.0)
        if extra > 0:
            charged = seconds * extra / calls
            if name in theirs:  # never more than this side spent in it beyond the hand-written side
                charged = min(charged, max(0.0, seconds - _cost(theirs[name], raw["profiler_s"])))
            extra_calls, extra_s = extra_calls + extra, extra_s + charged
            if charged > largest[2]:
                largest = [name, extra, charged]
    raw_calls = sum(entry[CALLS] for entry in theirs.values())
    loop_s = _loop_s(accel) - _loop_s(raw)
    return {"seconds": max(0.0, own_s + extra_s + loop_s), "own_s": own_s, "extra_s": extra_s,
            "loop_s": loop_s, "own_calls": own_calls, "extra_calls": extra_calls, "raw_calls": raw_calls,
            "largest": largest}  # fmt: skip
