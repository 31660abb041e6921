"""The first program of every worker of `accel launch`: tie it to the launcher, then become the script.

Usage (by torchrun_args only): `python -u _worker_exec.py LAUNCHER_PID [-m] SCRIPT [ARGS...]`.

The launcher runs torch's elastic agent in its own process, and the agent starts the workers as its
children. A SIGKILLed launcher runs no handler, so nothing would stop them: they would live on under
PID 1. On Linux this program asks the kernel to SIGKILL the worker when its parent dies
(`prctl(PR_SET_PDEATHSIG)`), a setting that survives exec, then replaces itself with
`python [same flags] [-m] SCRIPT ARGS`: same pid, and the script starts exactly as if started directly.
Standard library only; nothing of it is left in the script's process.
"""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_USAGE = "usage: _worker_exec.py LAUNCHER_PID [-m] SCRIPT [ARGS...]"


def tie_to_parent(parent_pid: int) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); return whether the parent lives.

    False means this process was already re-parented: the launcher `parent_pid` died while it started.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(error)}")
    # Checked after the request: a parent that dies from now on takes us with it, one already dead did not.
    return os.getppid() == parent_pid


def script_command(orig_argv: list[str], argv: list[str], executable: str) -> list[str]:
    """Return the command that runs the script as `python [flags] [-m] SCRIPT ARGS` (flags as given to us).

    `orig_argv`/`argv` are sys.orig_argv/sys.argv of this program: the interpreter's own flags
    (`-u`) are what orig_argv holds before this file's name.
    """
    flags = orig_argv[1 : len(orig_argv) - len(argv)]
    return [executable or orig_argv[0], *flags, *argv[2:]]


def main() -> None:
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        sys.exit(_USAGE)
    try:
        launcher_alive = tie_to_parent(int(sys.argv[1]))
    except OSError as error:
        launcher_alive = True  # the kernel refused: run the worker untied rather than not at all
        sys.stderr.write(f"accel launch: this worker may outlive a killed launcher ({error})\n")
    if not launcher_alive:
        os._exit(128 + signal.SIGKILL)  # nobody would watch or stop this worker
    command = script_command(list(sys.orig_argv), sys.argv, sys.executable)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
