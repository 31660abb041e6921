"""Each rank's log of its last user-level collectives, so that a stalled job can say where each rank is.

`named_collective` (the one place every user-level collective enters) records the operation, a short
summary of its input, its sequence number on this rank and the caller's file:line outside accel,
torch and the standard library (a wait in `queue` or `threading` says nothing about the script).
The log is a ring of the last CAPACITY entries, always on, so it must stay cheap: the caller is
found by walking `sys._getframe` with a per-code-object cache of "is this frame ours" (no
`inspect.stack()`, which reads source files), and inputs are summarised as the dtype and shape
objects torch already holds, turned into text only when a report is written. `progress` counts
collectives entered and left and optimizer steps: the hang watchdog's heartbeat. Code outside this
module that makes progress (an optimizer step) adds to it in place, `collective_log.progress += 1`:
a call there would cost a frame on every step for one integer.
"""

from __future__ import annotations

import collections
import os
import sys
import time
import types
from typing import Any, NamedTuple

CAPACITY = 32
# Frames of these top-level modules are accel's or torch's own: the caller is the first frame outside them.
_OUR_PACKAGES = frozenset(
    {
        "accel",
        "accel_state",
        "accel_data",
        "accel_amp",
        "accel_launch",
        "accel_deepspeed",
        "accel_xla",
        "accel_big_modeling",
        "torch",
        "contextlib",
        "functools",
    }
)
_ours: dict[types.CodeType, bool] = {}


class Entry(NamedTuple):
    """One collective of this rank: what, with what, from where, and when it was entered.

    A tuple, built in one step on the hot path; every entry but the `current()` one has returned (or raised).
    """

    sequence: int
    operation: str
    summary: Any  # raw: (dtype, shape), (type name, length) or a type name; see describe_input
    code: types.CodeType | None  # the caller's code object (its file and function), None if not found
    lineno: int
    entered: float

    @property
    def filename(self) -> str:
        return "<accel>" if self.code is None else self.code.co_filename

    @property
    def site(self) -> str:
        """Return "file:line" of the call."""
        return f"{self.filename}:{self.lineno}"

    def label(self) -> str:
        """Return e.g. "gather #3 at train.py:12"."""
        return f"{self.operation} #{self.sequence} at {short_path(self.filename)}:{self.lineno}"

    def as_dict(self) -> dict[str, Any]:
        """Return the entry as JSON-ready values (the input summary as text)."""
        return {
            "sequence": self.sequence,
            "operation": self.operation,
            "input": describe_input(self.summary),
            "file": self.filename,
            "line": self.lineno,
            "function": "" if self.code is None else self.code.co_name,
            "entered": self.entered,
        }


_entries: collections.deque[Entry] = collections.deque(maxlen=CAPACITY)
_sequence = 0
_current: Entry | None = None  # the outermost collective in flight, if any
progress = 0  # bumped on every collective entered or left and every optimizer step


_new = tuple.__new__


def _standard_library() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple({os.path.join(paths[key], "") for key in ("stdlib", "platstdlib") if key in paths})


_STDLIB = _standard_library()


def _learn(frame: types.FrameType) -> bool:
    """Decide once per code object: accel's, torch's or the standard library's (not site-packages)."""
    name = frame.f_globals.get("__name__")
    filename = frame.f_code.co_filename
    ours = (isinstance(name, str) and name.partition(".")[0] in _OUR_PACKAGES) or (
        filename.startswith("<frozen")
        or (filename.startswith(_STDLIB) and "-packages" + os.sep not in filename)
    )
    _ours[frame.f_code] = ours
    return ours


def is_ours(frame: types.FrameType) -> bool:
    """Return True when `frame` runs code of accel or torch (cached per code object)."""
    ours = _ours.get(frame.f_code)
    return _learn(frame) if ours is None else ours


def user_frame(frame: types.FrameType | None) -> types.FrameType | None:
    """Return the first frame from `frame` outwards that is not accel's or torch's (None if all are)."""
    while frame is not None and is_ours(frame):
        frame = frame.f_back
    return frame


_TENSOR_TYPES: set[type] = set()  # exact types seen to be tensors (torch.Tensor, Parameter), learnt


def _is_tensor(data: Any) -> bool:
    if hasattr(data, "shape") and hasattr(data, "dtype"):
        _TENSOR_TYPES.add(type(data))
        return True
    return False


def _summary(data: Any) -> Any:
    if isinstance(data, (list, tuple, dict)):
        return (type(data).__name__, len(data))
    return None if data is None else type(data).__name__


def describe_input(summary: Any) -> str:
    """Return the text of an entry's input summary, e.g. "float32[8, 16]", "list of 3"."""
    if summary is None:
        return ""
    if isinstance(summary, tuple) and isinstance(summary[1], int):
        return f"{summary[0]} of {summary[1]}"
    if isinstance(summary, tuple):
        dtype, shape = summary
        return f"{str(dtype).removeprefix('torch.')}[{', '.join(str(size) for size in shape)}]"
    return str(summary)


def enter(operation: str, data: Any = None, depth: int = 2) -> Entry:
    """Record that this rank enters `operation` on `data`; return its entry (for `leave`).

    `depth` is how many frames above this call to start looking for the caller. The hot path of
    every collective: the frame walk is inlined, and the summary keeps torch's own objects.
    """
    global _sequence, _current, progress
    _sequence += 1
    progress += 1
    frame: types.FrameType | None = sys._getframe(depth)
    known = _ours
    while frame is not None:
        ours = known.get(frame.f_code)
        if ours is None:
            ours = _learn(frame)
        if not ours:
            break
        frame = frame.f_back
    if type(data) in _TENSOR_TYPES or (data is not None and _is_tensor(data)):
        summary: Any = (data.dtype, data.shape)  # no reference to the tensor itself
    else:
        summary = _summary(data)
    # tuple.__new__ skips the named tuple's Python-level constructor (a microsecond here).
    if frame is None:
        entry = _new(Entry, (_sequence, operation, summary, None, 0, time.time()))
    else:
        entry = _new(Entry, (_sequence, operation, summary, frame.f_code, frame.f_lineno, time.time()))
    _entries.append(entry)
    _current = entry
    return entry


def leave(entry: Entry) -> None:
    """Record that `entry`'s collective returned or raised."""
    global _current, progress
    progress += 1
    if _current is entry:
        _current = None


def current() -> Entry | None:
    """Return the outermost collective this rank is in, or None."""
    return _current


def sequence() -> int:
    """Return how many collectives this rank entered."""
    return _sequence


def entries() -> list[Entry]:
    """Return the last CAPACITY entries, oldest first."""
    return list(_entries)


def short_path(filename: str) -> str:
    """Return `filename` without its folder (the diagnosis keeps full paths in its JSON)."""
    return filename.rsplit("/", 1)[-1]


def clear() -> None:
    """Forget the log (tests only)."""
    global _sequence, _current, progress
    _entries.clear()
    _sequence = 0
    _current = None
    progress = 0
