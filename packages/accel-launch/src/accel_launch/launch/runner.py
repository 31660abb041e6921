"""Runs a TorchrunCall in this process through torch's elastic agent (a job whose launch hook starts
its replicas itself: accel's replica program, `run_program`) and turns its outcome into an exit code.

The agent already starts, watches and stops the workers; what it lacks is a short answer for a
person: a failed rank ends in one line naming the rank and its exit code instead of the agent's
traceback, while the workers' own output (their tracebacks included) goes to the console untouched.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from accel_launch.launch.start_up import imports_without_collection

# The agent logs at WARNING level on every launch (banners, rendezvous details); only errors help.
_AGENT_LOGLEVEL = "ERROR"
PREFIX = "accel launch"
_AGENT_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.distributed.run")


def run_torchrun(argv: Sequence[str], env: Mapping[str, str], *, debug: bool = False) -> int:
    """Return the job's exit code after running `torch.distributed.run` with `argv` and worker `env`.

    `debug` keeps the launcher's traceback when the launcher itself fails. A rank that fails, or a
    job without progress for ACCEL_HANG_TIMEOUT seconds, gets one diagnosis of every rank first
    (accel_launch.launch.supervisor), written as JSON into torchrun's `--log_dir` when `argv` has
    one (else into the job's diagnosis folder). Meant for a launcher's own process: what it imports
    is frozen out of the collector's walks (accel_launch.launch.start_up).
    """
    with imports_without_collection():
        from accel_launch.launch.supervisor import Supervisor

    env = dict(env)
    supervisor = Supervisor.for_job(env, _log_dir(argv))
    try:
        return _run_supervised(argv, env, supervisor, debug)
    finally:
        supervisor.close()


def _log_dir(argv: Sequence[str]) -> str | None:
    """Return the value of torchrun's `--log_dir` in `argv` (before the script), or None."""
    arguments = list(argv)
    for index, argument in enumerate(arguments[:-1]):
        if argument in ("--log_dir", "--log-dir"):
            return arguments[index + 1]
        if not argument.startswith("-") and (index == 0 or not arguments[index - 1].startswith("-")):
            break  # the script: what follows is its own
    return None


def _run_supervised(argv: Sequence[str], env: Mapping[str, str], supervisor: Any, debug: bool) -> int:
    os.environ.update(env)
    with imports_without_collection():
        quiet_agent_logs()
        from torch.distributed import run as torchrun
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

        from accel_launch.launch.supervisor import supervising
        from accel_launch.rendezvous import loopback as loopback_rendezvous

    loopback_rendezvous.register()
    args = torchrun.get_args_parser().parse_args(list(argv))
    try:
        with supervising(supervisor):
            torchrun.run(args)
    except ChildFailedError as error:
        if supervisor.hung:
            _say(
                f"no rank made progress for {supervisor.hang_timeout:g} s (--hang_timeout); "
                "the job was stopped (see the diagnosis above)"
            )
            return 1
        return _report_failures({rank: (f.exitcode, f.timestamp) for rank, f in error.failures.items()})
    except SignalException as error:
        signum = int(error.sigval)
        _say(f"stopped by {signal.Signals(signum).name}; all workers were stopped")
        return 128 + signum
    except KeyboardInterrupt:
        _say("interrupted; all workers were stopped")
        return 128 + signal.SIGINT
    except Exception as error:
        if debug:
            raise
        reason = f"{type(error).__name__}: {_first_line(error)}"
        _say(f"the launcher failed: {reason} (use --debug for a traceback)")
        return 1
    return 0


def run_program(argv: Sequence[str], env: Mapping[str, str], *, debug: bool = False, job: str = "job") -> int:
    """Return the exit code of the program `argv` (see accel_launch.launch._replica_worker) run with `env`
    added to this environment. A failure ends in one line naming `job` ("the XLA job") and its exit code.

    `debug` keeps the launcher's traceback when the program cannot be started at all.
    """
    import subprocess

    try:
        worker = subprocess.Popen(list(argv), env={**os.environ, **env})
    except OSError as error:
        if debug:
            raise
        _say(
            f"the launcher failed: {type(error).__name__}: {_first_line(error)} (use --debug for a traceback)"
        )
        return 1
    try:
        code = worker.wait()
    except KeyboardInterrupt:
        worker.send_signal(signal.SIGINT)
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        _say(f"interrupted; the {job} was stopped")
        return 128 + signal.SIGINT
    if code < 0:
        _say(f"the {job} was killed by {_signal_name(-code)}")
        return 128 - code
    if code:
        _say(f"the {job} failed with exit code {code} (see its traceback above)")
    return code


def _report_failures(failures: Mapping[int, tuple[int, int]]) -> int:
    """Print one line naming the rank(s) that failed first; return the exit code for the job.

    `failures` maps rank to (exit code, time of failure in whole seconds). Ranks that fail in the
    same second are all named: a crashed rank makes its peers fail in the same instant, and the
    agent's timestamps cannot tell which came first.
    """
    # Ranks ended by SIGTERM were stopped by the agent because another rank failed: not culprits.
    culprits = {rank: f for rank, f in failures.items() if f[0] != -signal.SIGTERM} or dict(failures)
    first_time = min(timestamp for _, timestamp in culprits.values())
    first = sorted(rank for rank, (_, timestamp) in culprits.items() if timestamp == first_time)
    later = len(culprits) - len(first)
    if len(first) == 1:
        rank = first[0]
        code = failures[rank][0]
        if code < 0:
            message = f"rank {rank} was killed by {_signal_name(-code)}"
        else:
            message = f"rank {rank} failed with exit code {code} (see its traceback above)"
    else:
        each = " and ".join(f"rank {rank} ({_describe_exit(failures[rank][0])})" for rank in first)
        message = f"{each} failed at the same time; see their tracebacks above"
    if later:
        message += f"; {later} more rank(s) failed after that"
    return_code = failures[first[0]][0]
    _say(message)
    if return_code < 0:
        return 128 - return_code
    # An exit code outside 1..255 would wrap around (256 reads as success).
    return return_code if 0 < return_code < 256 else 1


def _describe_exit(exitcode: int) -> str:
    return f"killed by {_signal_name(-exitcode)}" if exitcode < 0 else f"exit code {exitcode}"


def quiet_agent_logs() -> None:
    # Most agent loggers take their level from LOGLEVEL when their module is imported, the others
    # from their parent logger. LOGLEVEL is set only for those imports: the workers inherit our
    # environment, and their logging is theirs to choose. A LOGLEVEL the user set wins.
    if "LOGLEVEL" in os.environ:
        return
    os.environ["LOGLEVEL"] = _AGENT_LOGLEVEL
    try:
        import torch.distributed.elastic.rendezvous.static_tcp_rendezvous  # noqa: F401
        import torch.distributed.run  # noqa: F401
    finally:
        del os.environ["LOGLEVEL"]
    for name in _AGENT_LOGGERS:
        logging.getLogger(name).setLevel(_AGENT_LOGLEVEL)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"


def _say(message: str) -> None:
    print(f"{PREFIX}: {message}", file=sys.stderr, flush=True)
