"""The one multi-process test helper of the monorepo: run a script or a function on N real CPU ranks.

Every package's tests and the integration tests use these two functions instead of their own
process pools, so that what is tested is what `accel launch` really starts (torch's elastic agent,
gloo, env vars). Neither function imports torch in the calling process.
"""

from __future__ import annotations

import inspect
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

_WORKER = Path(__file__).with_name("_rank_worker.py")
# Seconds the launcher gets to stop its workers on SIGTERM before everything is killed.
_GRACE_SECONDS = 5.0
_TAIL_CHARS = 4000


class LaunchTimeoutError(AssertionError):
    """A launched job ran past its timeout; it was killed, and the message holds its output so far."""


def launch_script(
    script: str | os.PathLike[str],
    num_processes: int,
    script_args: Iterable[object] = (),
    *,
    launch_args: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
    cpu: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Return the finished `accel launch --cpu --num_processes N [launch_args] script [script_args]`
    (without `--cpu` when `cpu` is False: one GPU per process where the machine has them).

    Output is captured as text; a non-zero exit is returned, not raised. A job still running after
    `timeout` seconds is killed with all its workers and LaunchTimeoutError is raised.
    """
    command = [
        sys.executable, "-m", "accel_launch.commands.cli", "launch", *(["--cpu"] if cpu else []),
        "--num_processes", str(num_processes),
        *launch_args, str(script), *(str(arg) for arg in script_args),
    ]  # fmt: skip
    full_env = {**os.environ, **(env or {})}
    # Its own session, so that the launcher and everything it started can be found and killed.
    process = subprocess.Popen(
        command,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stdout, stderr = stop_job(process)
        raise LaunchTimeoutError(
            f"{script} on {num_processes} process(es) did not finish within {timeout:g} s and was killed\n"
            f"--- stdout (tail) ---\n{_tail(stdout)}\n--- stderr (tail) ---\n{_tail(stderr)}"
        ) from None
    except BaseException:
        # Ctrl-C in the test run: the job is in another session and would not get the signal.
        stop_job(process)
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def run_on_ranks(
    fn: Callable[..., Any],
    num_processes: int,
    *args: Any,
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
    cpu: bool = True,
) -> list[Any]:
    """Return `fn(*args)` as computed on each of `num_processes` launched ranks, ordered by rank.

    `fn` must be a module-level function (it is loaded again from its file on every rank) and its
    arguments and return value must be picklable; `cpu=False` launches on the GPUs. A rank that
    raises, or a job that exits non-zero, raises AssertionError with each failing rank's traceback
    and the end of the job's stderr.
    """
    file, module_name = _function_source(fn)
    with tempfile.TemporaryDirectory(prefix="accel-ranks-") as tmp:
        call_file = Path(tmp) / "call.pkl"
        call = {"file": file, "module": module_name, "qualname": fn.__qualname__, "args": pickle.dumps(args)}
        call_file.write_bytes(pickle.dumps(call))
        result = launch_script(_WORKER, num_processes, [call_file, tmp], env=env, timeout=timeout, cpu=cpu)
        outcomes = [_read_outcome(Path(tmp) / f"rank_{rank}.pkl") for rank in range(num_processes)]

    failures = [
        f"--- rank {rank} ---\n{detail}" for rank, (status, detail) in enumerate(outcomes) if status != "ok"
    ]
    if failures or result.returncode != 0:
        raise AssertionError(
            f"{fn.__qualname__} on {num_processes} rank(s) failed (exit code {result.returncode})\n"
            + "\n".join(failures)
            + f"\n--- stderr of the job (tail) ---\n{_tail(result.stderr)}"
        )
    return [value for _, value in outcomes]


def _function_source(fn: Callable[..., Any]) -> tuple[str, str]:
    """Return the absolute file of `fn` and the module name to load it under on the ranks."""
    qualname = getattr(fn, "__qualname__", "")
    if not inspect.isfunction(fn) or "<" in qualname:
        raise ValueError(
            f"run_on_ranks needs a module-level function, got {fn!r}: lambdas, nested functions and "
            "other callables cannot be loaded again on the ranks"
        )
    file = str(Path(inspect.getfile(fn)).resolve())
    module_name = fn.__module__
    if module_name == "__main__":
        # Loading the file as __main__ would replace the worker's own script (and rerun the caller's).
        module_name = "_accel_run_on_ranks_main"
    return file, module_name


def _read_outcome(path: Path) -> tuple[str, Any]:
    if not path.exists():
        return "missing", "no result: the rank was stopped or died before finishing (see stderr below)"
    with path.open("rb") as handle:
        return pickle.load(handle)


def stop_job(process: subprocess.Popen[str]) -> tuple[str, str]:
    """Stop the launcher and every process below it; return the output read so far."""
    # Workers run in sessions of their own (torch starts them so), so the launcher's group does not
    # reach them: list them before their parent dies and they are re-parented.
    descendants = _descendants(process.pid)
    _signal(process.pid, signal.SIGTERM)  # the agent stops its workers on SIGTERM
    deadline = time.monotonic() + _GRACE_SECONDS
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    descendants |= _descendants(process.pid)
    _kill_group(process.pid)
    for pid in descendants:
        _kill_group(pid)
        _signal(pid, signal.SIGKILL)
    try:
        stdout, stderr = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        return "", "(the output could not be read: a process still holds the pipes)"
    return stdout or "", stderr or ""


def _descendants(root: int) -> set[int]:
    """Return the pids of all processes below `root` (Linux /proc; empty where that is missing)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses; the fields after its last ')' do not.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(pid: int, signum: signal.Signals) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= _TAIL_CHARS else "...\n" + text[-_TAIL_CHARS:]
