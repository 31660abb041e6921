"""This rank's side of the hang diagnosis: a report of where it is, written when the launcher asks.

Under `accel launch` every rank gets ACCEL_DIAGNOSIS_DIR, a folder of the job. At set-up the rank
writes `rank<R>.pid` there (the launcher signals only ranks that did, so a rank still importing
torch is never killed by a signal it cannot handle yet) and starts one daemon thread. When the
launcher sends REPORT_SIGNAL (SIGUSR1), the thread writes `rank<R>.json`: the stacks of all
threads, the innermost frame of the script's main thread, the collective in flight and the last
ones (collective_log). The channel is the file system and a signal, not the process group, which
is exactly what is stalled.

The thread, not the main thread, answers: a main thread blocked in a collective (in C++, the GIL
released) runs no Python signal handler until the collective returns, so the signal is routed to
the thread through `signal.set_wakeup_fd` (Python's C-level handler writes the signal number to a
pipe at once, whatever the main thread does). Where the wakeup fd is taken already (an asyncio
loop set one), the Python-level handler writes the report instead, when the main thread runs again.

A rank whose collective fails (timeout, lost peer) writes its report itself before raising: it
exits next, and the launcher reads the report of a rank that is gone. So does a rank that dies of
an uncaught exception (a `sys.excepthook`, chained to the one before it): its report's `where` is
the innermost frame of the script in the traceback, its `error` the exception. Without a diagnosis
folder (plain torchrun), a failed collective still prints one line naming it, its call site and the
last collectives before the error is raised.

With ACCEL_HANG_TIMEOUT set, the same thread writes `rank<R>.heartbeat` (collective_log.progress)
when it changed, so that the launcher sees when no rank made progress.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
import types
from typing import Any

from accel_state.environment import env_vars
from accel_state.process_group import collective_log

REPORT_SIGNAL = signal.SIGUSR1
_MAX_FRAMES = 60  # per thread, innermost kept
_C10D_FILE = os.path.join("torch", "distributed", "distributed_c10d.py")

_folder: str | None = None
_rank = 0
_answered_by_thread = False
_reported: BaseException | None = None  # the error this rank's last report was written for


def report_path(folder: str, rank: int) -> str:
    """Return where rank `rank` writes its report."""
    return os.path.join(folder, f"rank{rank}.json")


def pid_path(folder: str, rank: int) -> str:
    """Return where rank `rank` writes its pid once it can answer REPORT_SIGNAL."""
    return os.path.join(folder, f"rank{rank}.pid")


def heartbeat_path(folder: str, rank: int) -> str:
    """Return where rank `rank` writes its progress counter."""
    return os.path.join(folder, f"rank{rank}.heartbeat")


def install(rank: int) -> None:
    """Make this rank answer the launcher's REPORT_SIGNAL (once per process; nothing when not launched by
    `accel launch`, or when not called from the main thread)."""
    global _folder, _rank, _answered_by_thread
    folder = os.environ.get(env_vars.DIAGNOSIS_DIR)
    if _folder is not None or threading.current_thread() is not threading.main_thread():
        return
    _rank = rank  # named by the line a failed collective prints without a folder too
    if not folder:
        return
    if not os.path.isdir(folder):
        return
    if signal.getsignal(REPORT_SIGNAL) not in (signal.SIG_DFL, None):
        return  # the script handles SIGUSR1 itself: leave it be
    _folder, _rank = folder, rank
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if previous != -1:
        signal.set_wakeup_fd(previous)  # someone else's; theirs stays, our handler answers instead
        os.close(write_end)
    else:
        _answered_by_thread = True
    signal.signal(REPORT_SIGNAL, _on_signal)
    # Python restores the default action (ending the process) of handled signals as it shuts down:
    # a rank asked for its report while it exits would die of the signal instead of its own error.
    atexit.register(signal.signal, REPORT_SIGNAL, signal.SIG_IGN)
    sys.excepthook = _chained_excepthook(sys.excepthook)
    threading.Thread(
        target=_serve, args=(read_end, _hang_interval()), name="accel-diagnosis", daemon=True
    ).start()
    _write_atomically(pid_path(folder, rank), str(os.getpid()))


def _hang_interval() -> float | None:
    raw = os.environ.get(env_vars.HANG_TIMEOUT, "").strip()
    try:
        seconds = float(raw) if raw else 0.0
    except ValueError:
        return None
    return min(1.0, seconds / 5) if seconds > 0 else None


def _on_signal(signum: int, frame: types.FrameType | None) -> None:
    if not _answered_by_thread:
        write_report("asked by the launcher")


def _serve(read_end: int, heartbeat_interval: float | None) -> None:
    """Answer REPORT_SIGNAL (routed through the wakeup pipe) and write the heartbeat until the end."""
    beat = -1
    while True:
        if heartbeat_interval is not None and collective_log.progress != beat and _folder is not None:
            beat = collective_log.progress
            _write_atomically(heartbeat_path(_folder, _rank), str(beat))
        readable, _, _ = select.select([read_end], [], [], heartbeat_interval)
        if readable:
            signals = os.read(read_end, 512)
            if _answered_by_thread and int(REPORT_SIGNAL) in signals:
                write_report("asked by the launcher")


def _chained_excepthook(previous: Any) -> Any:
    """Return a sys.excepthook that writes this rank's report for an uncaught exception, then calls
    `previous` (which prints the traceback as before)."""

    def excepthook(kind: type[BaseException], error: BaseException, tb: types.TracebackType | None) -> None:
        if not _already_reported(error):
            write_report("it raised an uncaught exception", error, tb)
        previous(kind, error, tb)

    return excepthook


def _already_reported(error: BaseException) -> bool:
    """Return True when the report on disk was written for `error` or an error it wraps (a failed
    collective's report, written inside the collective, says more than one written after it)."""
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return False
        if seen is _reported:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def write_report(
    reason: str, error: BaseException | None = None, tb: types.TracebackType | None = None
) -> None:
    """Write this rank's report (stacks, last collectives) into the job's diagnosis folder; without
    one, print a line naming the failed collective (if any) instead. `tb`: the uncaught error's
    traceback, which then says where the rank is."""
    global _reported
    _reported = error
    if _folder is None:
        if error is not None:
            _print_failed_collective()
        return
    try:
        report = build_report(reason, error, tb)
        _write_atomically(report_path(_folder, _rank), json.dumps(report, indent=1))
    except Exception:  # noqa: BLE001 - a report must never be the reason a rank fails
        pass


def _print_failed_collective() -> None:
    """Print e.g. "accel: rank 0 failed in wait_for_everyone #2 at train.py:12; last collectives: ..."."""
    current = collective_log.current()
    if current is None:
        return
    done = [entry.label() for entry in collective_log.entries() if entry is not current][-3:]
    last = f"; last collectives: {', '.join(done)}" if done else "; no collective done before it"
    print(f"accel: rank {_rank} failed in {current.label()}{last}", file=sys.stderr, flush=True)


def build_report(
    reason: str, error: BaseException | None = None, tb: types.TracebackType | None = None
) -> dict[str, Any]:
    """Return this rank's report: where each thread is, the collective in flight and the last ones
    (where the main thread is, from `tb` when given: the traceback of the error it dies of)."""
    frames = sys._current_frames()
    me = threading.get_ident()
    main = threading.main_thread().ident
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    threads: list[dict[str, Any]] = []
    for ident, frame in frames.items():
        if ident == me and ident != main:
            continue  # this thread, writing the report
        stack = _traceback_stack(tb) if tb is not None and ident == main else _stack(frame)
        threads.append({"name": names.get(ident, f"thread {ident}"), "main": ident == main, "frames": stack})
    threads.sort(key=lambda thread: not thread["main"])
    if tb is not None:
        where = _traceback_where(tb)
    else:
        main_frame = frames.get(main) if main is not None else None
        found = _script_frame(collective_log.user_frame(main_frame))
        where = None if found is None else _frame_dict(found)
    current = collective_log.current()
    main_stack = threads[0]["frames"] if threads and threads[0]["main"] else []
    return {
        "rank": _rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "time": time.time(),
        "reason": reason,
        "error": "" if error is None else f"{type(error).__name__}: {str(error).splitlines()[0][:300]}",
        "sequence": collective_log.sequence(),
        "current": None if current is None else current.as_dict(),
        "collectives": [entry.as_dict() for entry in collective_log.entries()],
        "where": where,
        "torch_collective": _torch_collective(main_stack),
        "threads": threads,
    }


def _torch_collective(stack: list[dict[str, Any]]) -> str | None:
    """Return the torch.distributed function the main thread is in (or raised from), e.g. inside FSDP's
    parameter all-gather, which is none of accel's collectives; None if it is in none."""
    for frame in reversed(stack):
        if frame["file"].endswith(_C10D_FILE) and frame["function"] != "wrapper":
            return str(frame["function"])
    return None


def _is_installed_library(frame: types.FrameType) -> bool:
    """True for code installed in site-packages (an engine such as DeepSpeed, a model library)."""
    return "-packages" + os.sep in frame.f_code.co_filename


def _script_frame(frame: types.FrameType | None) -> types.FrameType | None:
    """Return the first frame from `frame` outwards that is the user's own code, not an installed
    library's: a rank waiting in DeepSpeed's all-reduce is named by the script line that called the
    engine. `frame` itself when every frame out is a library's (a script installed as a package)."""
    found = frame
    while found is not None and (collective_log.is_ours(found) or _is_installed_library(found)):
        found = found.f_back
    return frame if found is None else found


def _traceback_where(tb: types.TracebackType | None) -> dict[str, Any] | None:
    """Return the innermost frame of the user's own code in `tb` (outside accel, torch, the standard
    library and installed libraries; the innermost outside the first three when none is)."""
    where = script = None
    while tb is not None:
        if not collective_log.is_ours(tb.tb_frame):
            where = _frame_dict(tb.tb_frame, tb.tb_lineno)
            if not _is_installed_library(tb.tb_frame):
                script = where
        tb = tb.tb_next
    return script or where


def _traceback_stack(tb: types.TracebackType | None) -> list[dict[str, Any]]:
    """Return the frames of `tb`, outermost first, innermost kept."""
    stack: list[dict[str, Any]] = []
    while tb is not None:
        stack.append(_frame_dict(tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return stack[-_MAX_FRAMES:]


def _frame_dict(frame: types.FrameType, lineno: int | None = None) -> dict[str, Any]:
    code = frame.f_code
    line = frame.f_lineno if lineno is None else lineno
    summary = traceback.FrameSummary(code.co_filename, line, code.co_name)
    return {
        "file": code.co_filename,
        "line": line,
        "function": code.co_name,
        "code": summary.line or "",
    }


def _stack(frame: types.FrameType | None) -> list[dict[str, Any]]:
    """Return the frames from `frame` outwards, outermost first (as a traceback reads)."""
    stack: list[dict[str, Any]] = []
    while frame is not None and len(stack) < _MAX_FRAMES:
        stack.append(_frame_dict(frame))
        frame = frame.f_back
    return stack[::-1]


def _write_atomically(path: str, text: str) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(temporary, path)
