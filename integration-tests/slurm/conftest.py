"""A one-node SLURM cluster on loopback for the session: munged, slurmctld and slurmd in a temporary folder.

Debian's `slurm-wlm` and `munge` packages run as they are: each daemon in the foreground (`-D`, `-F`)
as a child of the test run, with its own key, socket, spool, state and log files, so nothing of the
machine's own SLURM or MUNGE set-up (if any) is read or touched. Every command a test runs gets
SLURM_CONF pointing at this cluster. Without the binaries the tests skip: the nox session `slurm`
installs them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BINARIES = (
    "munged",
    "slurmctld",
    "slurmd",
    "srun",
    "sbatch",
    "salloc",
    "sinfo",
    "squeue",
    "scancel",
    "scontrol",
)
NODE = "localhost"
# Seconds the daemons get to come up, and to go down on SIGTERM before they are killed.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
_TAIL = 4000

SLURM_CONF = """\
ClusterName=accel-tests
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge/munge.socket
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd.log
# No cgroups: tasks are tracked by their process tree and not bound to CPUs.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1024 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass(frozen=True)
class BatchJob:
    """A batch job that has ended: its state (COMPLETED, FAILED, ...), exit code and output."""

    job_id: str
    state: str
    exit_code: int
    output: str


class SlurmError(AssertionError):
    """A cluster command failed or ran past its timeout; the message holds its output and the logs."""


@dataclass
class SlurmCluster:
    """The running cluster: its folder, the env its commands need, and helpers that never hang."""

    folder: Path
    env: dict[str, str]
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(
        self, command: Sequence[str], *, timeout: float, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Return the finished `command` (text output); one running past `timeout` s cancels every job
        and raises SlurmError."""
        process = subprocess.Popen(
            list(command),
            env=self.env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.cancel_all()
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            raise SlurmError(
                f"{' '.join(command)} did not finish within {timeout:g} s; its jobs were cancelled\n"
                f"--- stdout ---\n{stdout[-_TAIL:]}\n--- stderr ---\n{stderr[-_TAIL:]}\n{self.logs()}"
            ) from None
        return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)

    def check(self, command: Sequence[str], *, timeout: float = 60) -> str:
        """Return the stdout of a short cluster command that must succeed (sinfo, scontrol, ...)."""
        result = self.run(command, timeout=timeout)
        if result.returncode != 0:
            raise SlurmError(f"{' '.join(command)} exited with {result.returncode}\n{result.stderr}")
        return result.stdout

    def submit(self, arguments: Sequence[str], *, output: Path, cwd: Path) -> str:
        """Return the id of the batch job `sbatch --output=OUTPUT ARGUMENTS` submitted from `cwd`."""
        result = self.run(["sbatch", "--parsable", f"--output={output}", *arguments], timeout=60, cwd=cwd)
        if result.returncode != 0:
            raise SlurmError(f"sbatch {' '.join(arguments)} exited with {result.returncode}\n{result.stderr}")
        return result.stdout.strip().split(";")[0]

    def wait(self, job_id: str, output: Path, *, timeout: float) -> BatchJob:
        """Return batch job `job_id` once it has ended; one still running after `timeout` s is cancelled.

        Polled twice a second: `sbatch --wait` backs off to 10 s between its polls.
        """
        deadline = time.monotonic() + timeout
        while job_id in self.job_ids():
            if time.monotonic() > deadline:
                self.cancel_all()
                text = output.read_text(errors="replace") if output.exists() else ""
                raise SlurmError(f"job {job_id} ran past {timeout:g} s and was cancelled\n{text[-_TAIL:]}")
            time.sleep(0.5)
        record = self.check(["scontrol", "--oneliner", "show", "job", job_id])
        fields = dict(item.split("=", 1) for item in record.split() if "=" in item)
        text = output.read_text(errors="replace") if output.exists() else ""
        return BatchJob(job_id, fields["JobState"], int(fields["ExitCode"].split(":")[0]), text)

    def sbatch(self, arguments: Sequence[str], *, output: Path, cwd: Path, timeout: float) -> BatchJob:
        """Return the ended batch job of `sbatch --output=OUTPUT ARGUMENTS`, submitted from `cwd`."""
        return self.wait(self.submit(arguments, output=output, cwd=cwd), output, timeout=timeout)

    def job_ids(self) -> list[str]:
        """Return the ids of the jobs still queued or running."""
        return self.check(["squeue", "--noheader", "--format=%i"]).split()

    def cancel_all(self) -> None:
        """Cancel every job, so that a failed test leaves none behind for the next one."""
        ids = self.job_ids()
        if ids:
            subprocess.run(["scancel", *ids], env=self.env, timeout=30, check=False)
        deadline = time.monotonic() + 30
        while self.job_ids() and time.monotonic() < deadline:
            time.sleep(0.5)

    def logs(self) -> str:
        """Return the end of every daemon's log, for a failure message."""
        parts = []
        for path in sorted((self.folder / "log").glob("*")):
            parts.append(f"--- {path.name} (tail) ---\n{path.read_text(errors='replace')[-_TAIL:]}")
        return "\n".join(parts)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _online_cpus() -> int:
    # getconf counts the CPUs online; `nproc` follows OMP_NUM_THREADS, which the test sessions set to 1.
    try:
        return int(subprocess.run(["getconf", "_NPROCESSORS_ONLN"], capture_output=True, text=True,
                                  timeout=10, check=True).stdout)  # fmt: skip
    except (OSError, ValueError, subprocess.SubprocessError):
        return os.cpu_count() or 1


def _job_env(folder: Path) -> dict[str, str]:
    """Return this process's env without any enclosing job's SLURM variables, pointed at the cluster."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))
    }
    # Jobs run `python` and `accel` from PATH (the example job script does): this interpreter's first.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["SLURM_CONF"] = str(folder / "slurm.conf")
    return env


def _write_config(folder: Path) -> None:
    for name in ("munge", "state", "spool", "log"):
        (folder / name).mkdir()
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    user = subprocess.run(
        ["id", "-un"], capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()
    (folder / "slurm.conf").write_text(
        SLURM_CONF.format(
            node=NODE,
            folder=folder,
            user=user,
            ctld_port=_free_port(),
            slurmd_port=_free_port(),
            cpus=_online_cpus(),
        )
    )


def _start(cluster: SlurmCluster, name: str, command: list[str]) -> None:
    log = (cluster.folder / "log" / f"{name}.out").open("wb")
    cluster.daemons.append(
        subprocess.Popen(
            command, env=cluster.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    )
    log.close()


def _check_daemons(cluster: SlurmCluster) -> None:
    for daemon in cluster.daemons:
        if daemon.poll() is not None:
            raise SlurmError(f"{daemon.args[0]} exited with {daemon.returncode}\n{cluster.logs()}")


def _wait_for_socket(cluster: SlurmCluster, path: Path) -> None:
    """Wait until munged listens: slurmctld and slurmd authenticate through it from their start."""
    deadline = time.monotonic() + START_TIMEOUT
    while not path.is_socket():
        _check_daemons(cluster)
        if time.monotonic() > deadline:
            raise SlurmError(f"munged made no socket {path} within {START_TIMEOUT:g} s\n{cluster.logs()}")
        time.sleep(0.1)


def _wait_until_idle(cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    state = ""
    while time.monotonic() < deadline:
        _check_daemons(cluster)
        result = subprocess.run(["sinfo", "--noheader", "--format=%T", f"--nodes={NODE}"], env=cluster.env,
                                capture_output=True, text=True, timeout=30)  # fmt: skip
        state = result.stdout.strip()
        if state == "idle":
            return
        time.sleep(0.5)
    raise SlurmError(f"node {NODE} is not idle after {START_TIMEOUT:g} s (state {state!r})\n{cluster.logs()}")


def _stop(cluster: SlurmCluster) -> None:
    """Cancel what still runs, then stop the daemons (slurmd, slurmctld, munged), killing any that stay."""
    try:
        cluster.cancel_all()
    except (SlurmError, OSError, subprocess.SubprocessError):
        pass  # the daemons go down anyway
    for daemon in reversed(cluster.daemons):
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=STOP_TIMEOUT)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Start a one-node cluster on loopback (munged, slurmctld -D, slurmd -D), wait until its node is
    idle, and stop it after the session."""
    missing = [name for name in BINARIES if shutil.which(name) is None]
    if missing:
        pytest.skip(
            "SLURM runs in the nox session slurm: `nox -s slurm` installs Debian's slurm-wlm and munge "
            f"(missing here: {', '.join(missing)})"
        )
    # munged refuses a socket in a folder others cannot enter: not under pytest's private tmp folders.
    folder = Path(tempfile.mkdtemp(prefix="accel-slurm-"))
    folder.chmod(0o755)
    cluster = SlurmCluster(folder, _job_env(folder))
    try:
        _write_config(folder)
        munge = folder / "munge"
        _start(cluster, "munged", [
            "munged", "--foreground", "--force", "--num-threads=10",
            f"--key-file={munge / 'munge.key'}", f"--socket={munge / 'munge.socket'}",
            f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}",
            f"--log-file={folder / 'log' / 'munged.log'}",
        ])  # fmt: skip
        _wait_for_socket(cluster, munge / "munge.socket")
        _start(cluster, "slurmctld", ["slurmctld", "-D"])
        _start(cluster, "slurmd", ["slurmd", "-D", "-N", NODE])
        _wait_until_idle(cluster)
        yield cluster
    finally:
        _stop(cluster)
        shutil.rmtree(folder, ignore_errors=True)
