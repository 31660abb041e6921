"""Asks every live rank where it is before torch's elastic agent tears a failed or hung job down.

The agent polls its workers every `--monitor_interval` and, as soon as one failed, stops all the
others (SIGTERM, inside the same poll). So the launcher runs the agent with a subclass whose poll
first looks at the workers itself: when one has exited with an error (a collective timed out and
raised, it crashed, it was killed), or when no rank made progress for `--hang_timeout` seconds,
it sends REPORT_SIGNAL to every live rank that is ready for it, waits a few seconds for their
reports in the job's diagnosis folder, prints one diagnosis (accel_launch.launch.diagnosis) and
writes it as JSON; then the agent's poll goes on and tears the job down as before. A job that
ends well never triggers it, and its diagnosis folder is removed.

A job on several machines has one agent per machine, each watching its own ranks only. They share
the reports through the rendezvous store the agents already hold (torch's TCPStore, on machine 0):
the launcher that diagnoses sets a key there, publishes its ranks' reports and waits a few seconds
for the others'; every other launcher looks for that key on its polls (at most every
_STORE_POLL seconds), asks its own live ranks and publishes their reports. Each prints the whole
job's diagnosis; a machine whose launcher does not answer in time is named as such.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from accel_launch.launch.diagnosis import diagnose, read_report
from accel_state.environment import env_vars
from accel_state.process_group.diagnosis import REPORT_SIGNAL, heartbeat_path, pid_path, report_path

REPORT_WAIT = 5.0  # seconds the launcher waits for the live ranks' reports
_REMOTE_WAIT = REPORT_WAIT + 3.0  # seconds it waits for the other machines' (they ask their ranks too)
_STORE_POLL = 0.25  # seconds between two looks for another machine's request in the store
_STORE_KEY = "accel-diagnosis"
_KILL_AFTER = 10.0  # seconds a hung job's ranks get to end on SIGTERM before SIGKILL
PREFIX = "accel launch"


class Supervisor:
    """Watches one job's workers from inside the agent's poll; see the module docstring."""

    def __init__(
        self, folder: str, hang_timeout: float | None, log_dir: str | None, owns_folder: bool
    ) -> None:
        self.folder = folder
        self.hang_timeout = hang_timeout
        self.log_dir = log_dir
        self.owns_folder = owns_folder
        self.hung = False  # the watchdog stopped the job
        self.written: list[str] = []  # diagnosis files written
        self._attempt: tuple[int, ...] = ()
        self._attempts = 0
        self._diagnosed = False
        self._last_progress = time.monotonic()
        self._next_beat_check = 0.0
        self._beats: dict[int, str] = {}
        self._kill_at = 0.0
        self._children: list[int] = []
        self.prefix = PREFIX  # of every line it prints
        self.summary: str | None = None  # the headline of the last diagnosis printed
        self._store: Any = None  # the rendezvous store, on a job of several machines
        self._store_key = _STORE_KEY
        self._remote: tuple[int, ...] = ()  # the ranks on other machines
        self._next_store_check = 0.0

    @classmethod
    def for_job(cls, env: dict[str, str], log_dir: str | None) -> Supervisor:
        """Return the supervisor of a job whose workers get `env`; sets the diagnosis folder in `env`."""
        given = env.get(env_vars.DIAGNOSIS_DIR) or os.environ.get(env_vars.DIAGNOSIS_DIR)
        if given:
            os.makedirs(given, exist_ok=True)
            folder, owns = given, False
        else:
            folder, owns = tempfile.mkdtemp(prefix="accel-diagnosis-"), True
        env[env_vars.DIAGNOSIS_DIR] = folder
        raw = (env.get(env_vars.HANG_TIMEOUT) or os.environ.get(env_vars.HANG_TIMEOUT) or "").strip()
        hang = float(raw) if raw else None
        return cls(folder, hang if hang and hang > 0 else None, log_dir, owns)

    def close(self) -> None:
        """Remove the diagnosis folder when it holds no diagnosis (a job that ended well leaves nothing)."""
        if not self.owns_folder or self.written and any(p.startswith(self.folder) for p in self.written):
            return
        for entry in os.listdir(self.folder):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.folder, entry))
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)

    # Called by the agent before each of its polls.
    def check(self, agent: Any, worker_group: Any) -> None:
        handlers = _exit_polls(getattr(agent, "_pcontext", None))
        if not handlers:
            return  # not started yet
        workers = {worker.global_rank: worker for worker in worker_group.workers}
        pids = tuple(worker.id for worker in workers.values())
        if pids != self._attempt:
            self._new_attempt(pids, workers)
            self._join_machines(agent, worker_group, workers)
        if self._diagnosed:
            if self.hung and time.monotonic() > self._kill_at:
                self._stop(workers, handlers, signal.SIGKILL)  # it ignored SIGTERM
            return
        exits = {rank: handlers[worker.local_rank]() for rank, worker in workers.items()}
        failed = sorted(rank for rank, code in exits.items() if code not in (None, 0))
        asked = None if failed else self._asked_elsewhere()
        if asked is not None:
            self._diagnosed = True
            self.diagnose(workers, handlers, f"{asked}, on another machine", asked_elsewhere=True)
        elif failed:
            self._diagnosed = True
            who = ", ".join(f"rank {rank} {_exit_words(exits[rank])}" for rank in failed)
            self.diagnose(workers, handlers, who)
        elif self.hang_timeout is not None and self._stalled(workers):
            self._diagnosed = True
            self.hung = True
            self.diagnose(workers, handlers, f"no rank made progress for {self.hang_timeout:g} s")
            # A hung rank's own children (a stuck loader worker) would outlive it, holding its output.
            self._children = [child for worker in workers.values() for child in _descendants(worker.id)]
            self._stop(workers, handlers, signal.SIGTERM)
            self._kill_at = time.monotonic() + _KILL_AFTER

    def _stop(self, workers: Mapping[int, Any], handlers: Mapping[int, Any], signum: int) -> None:
        # The agent then sees failed workers and tears the job down as after any failure.
        for worker in workers.values():
            if handlers[worker.local_rank]() is None:
                with contextlib.suppress(OSError):
                    os.kill(worker.id, signum)
        for child in self._children:
            with contextlib.suppress(OSError):
                os.kill(child, signum)

    def _new_attempt(self, pids: tuple[int, ...], workers: Mapping[int, Any]) -> None:
        self._attempt = pids
        self._attempts += 1
        self._diagnosed = False
        self._last_progress = time.monotonic()
        self._beats = {}
        for rank in workers:
            for path in (report_path(self.folder, rank), heartbeat_path(self.folder, rank)):
                with contextlib.suppress(OSError):
                    os.remove(path)

    def _join_machines(self, agent: Any, worker_group: Any, workers: Mapping[int, Any]) -> None:
        """Keep the rendezvous store when the job has ranks on other machines (see the module docstring)."""
        self._store = None
        world = max((int(getattr(worker, "world_size", 0) or 0) for worker in workers.values()), default=0)
        store = getattr(worker_group, "store", None)
        if store is None or world <= len(workers):
            return
        self._store = store
        self._remote = tuple(rank for rank in range(world) if rank not in workers)
        spec = getattr(worker_group, "spec", None)
        restarts = getattr(spec, "max_restarts", 0) - getattr(agent, "_remaining_restarts", 0)
        self._store_key = f"{_STORE_KEY}/{restarts}"  # each attempt's own keys (the agents restart together)

    def _asked_elsewhere(self) -> str | None:
        """Return the reason another machine's launcher diagnoses the job for, if it asked already."""
        now = time.monotonic()
        if self._store is None or now < self._next_store_check:
            return None
        self._next_store_check = now + _STORE_POLL
        key = f"{self._store_key}/asked"
        try:
            return self._store.get(key).decode() if self._store.check([key]) else None
        except Exception:  # noqa: BLE001 - machine 0's store is gone: the job is over there
            self._store = None
            return None

    def _share(
        self, reason: str, reports: dict[int, Any], exits: dict[int, int | None], asked_elsewhere: bool
    ) -> None:
        """Publish this machine's reports in the store and add the other machines' to `reports`."""
        store, base = self._store, self._store_key
        try:
            if not asked_elsewhere and not store.check([f"{base}/asked"]):
                store.set(f"{base}/asked", reason)
            for rank in list(reports):
                store.set(f"{base}/rank{rank}", json.dumps({"report": reports[rank], "exit": exits[rank]}))
            deadline = time.monotonic() + _REMOTE_WAIT
            pending = set(self._remote)
            while pending and time.monotonic() < deadline:
                for rank in sorted(pending):
                    key = f"{base}/rank{rank}"
                    if store.check([key]):
                        entry = json.loads(store.get(key))
                        reports[rank], exits[rank] = entry.get("report"), entry.get("exit")
                        pending.discard(rank)
                time.sleep(0.05)
        except Exception as error:  # noqa: BLE001 - the other machines' reports are a bonus
            self._say(f"could not share reports with the other machines: {type(error).__name__}: {error}")
        for rank in self._remote:
            reports.setdefault(rank, None)
            exits.setdefault(rank, None)

    def _stalled(self, workers: Mapping[int, Any]) -> bool:
        """Return True when no heartbeat changed for hang_timeout seconds (read at most once a second)."""
        now = time.monotonic()
        if now < self._next_beat_check:
            return False
        assert self.hang_timeout is not None
        self._next_beat_check = now + min(1.0, self.hang_timeout / 5)
        for rank in workers:
            try:
                beat = Path(heartbeat_path(self.folder, rank)).read_text()
            except OSError:
                continue
            if self._beats.get(rank) != beat:
                self._beats[rank] = beat
                self._last_progress = now
        return now - self._last_progress > self.hang_timeout

    def diagnose(
        self,
        workers: Mapping[int, Any],
        handlers: Mapping[int, Any],
        reason: str,
        asked_elsewhere: bool = False,
    ) -> None:
        """Ask the live ranks for their reports, then print and write one diagnosis (of every machine's
        ranks on a job of several; `asked_elsewhere`: another machine's launcher asked for it)."""
        asked_at = time.time()
        started = min(
            (
                os.path.getmtime(pid_path(self.folder, r))
                for r in workers
                if _exists(pid_path(self.folder, r))
            ),
            default=0.0,
        )
        waiting: dict[int, Any] = {}
        for rank, worker in workers.items():
            if handlers[worker.local_rank]() is not None or not _ready(self.folder, rank, worker.id):
                continue
            report = read_report(report_path(self.folder, rank))
            if report is not None and report.get("error") and report.get("time", 0) >= started:
                continue  # it wrote its own report when its collective failed: that one says more
            with contextlib.suppress(OSError):
                os.kill(worker.id, REPORT_SIGNAL)
                waiting[rank] = worker
        deadline = time.monotonic() + REPORT_WAIT
        while waiting and time.monotonic() < deadline:
            for rank, worker in list(waiting.items()):
                report = read_report(report_path(self.folder, rank))
                fresh = report is not None and report.get("time", 0) >= asked_at
                if fresh or handlers[worker.local_rank]() is not None:
                    del waiting[rank]
            time.sleep(0.05)
        reports = {rank: read_report(report_path(self.folder, rank)) for rank in workers}
        exits = {rank: handlers[worker.local_rank]() for rank, worker in workers.items()}
        elsewhere: tuple[int, ...] = ()
        if self._store is not None:
            self._share(reason, reports, exits, asked_elsewhere)
            elsewhere = tuple(rank for rank in self._remote if reports.get(rank) is None)
        if not any(reports.values()):
            return  # every rank ended without a report: their tracebacks say it all
        result = diagnose(reports, exits, reason, elsewhere)
        path = self._write(result.data)
        self.summary = result.lines[0]
        self._say(result.text)
        self._say(f"the diagnosis, with every thread's stack, is in {path}")

    def _say(self, message: str) -> None:
        for line in message.splitlines():
            print(f"{self.prefix}: {line}", file=sys.stderr, flush=True)

    def _write(self, data: dict[str, Any]) -> str:
        folder = self.log_dir or self.folder
        name = "diagnosis.json" if self._attempts <= 1 else f"diagnosis-attempt{self._attempts}.json"
        path = os.path.join(folder, name)
        try:
            os.makedirs(folder, exist_ok=True)
            with open(path, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=1)
        except OSError:
            path = os.path.join(self.folder, name)
            with open(path, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=1)
        self.written.append(path)
        return path


def _exit_polls(pcontext: Any) -> dict[int, Callable[[], int | None]]:
    """Return, per local rank, a function returning its worker's exit code (None: alive; -N: killed by
    signal N), for workers started as programs (`accel launch`) or as forked functions (notebook_launcher)."""
    handlers = getattr(pcontext, "subprocess_handlers", None)
    if handlers:
        return {rank: handler.proc.poll for rank, handler in handlers.items()}
    processes = getattr(getattr(pcontext, "_pc", None), "processes", None)
    if processes:
        return {
            rank: functools.partial(getattr, process, "exitcode") for rank, process in enumerate(processes)
        }
    return {}


def _descendants(pid: int) -> list[int]:
    """Return the processes below `pid` (Linux /proc; empty elsewhere)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        for child in parents.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _ready(folder: str, rank: int, pid: int) -> bool:
    """Return True when rank `rank` (process `pid`) set up its answer to REPORT_SIGNAL: signalling a
    process before that would end it."""
    try:
        return int(Path(pid_path(folder, rank)).read_text().strip()) == pid
    except (OSError, ValueError):
        return False


def _exit_words(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"failed with exit code {code}"


@contextlib.contextmanager
def supervising(supervisor: Supervisor) -> Iterator[None]:
    """Make torch's launcher run its workers under an agent that consults `supervisor` before each poll."""
    from torch.distributed.launcher import api

    base = api.LocalElasticAgent

    class SupervisedAgent(base):  # type: ignore[misc, valid-type]
        def _monitor_workers(self, worker_group: Any) -> Any:
            try:
                supervisor.check(self, worker_group)
            except Exception as error:  # noqa: BLE001 - a diagnosis must never break the job's own teardown
                supervisor._say(f"the diagnosis failed: {type(error).__name__}: {error}")
            return super()._monitor_workers(worker_group)

    api.LocalElasticAgent = SupervisedAgent  # type: ignore[misc]
    try:
        yield
    finally:
        api.LocalElasticAgent = base  # type: ignore[misc]
