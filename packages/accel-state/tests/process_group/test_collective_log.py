"""The per-rank collective log: what it records, where it says the call came from, what it costs."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import pytest
import torch

from accel_state.environment import env_vars
from accel_state.process_group import collective_log, diagnosis, timeouts


@pytest.fixture(autouse=True)
def _fresh_log():
    collective_log.clear()
    yield
    collective_log.clear()


def test_an_outermost_collective_is_logged_with_the_callers_line_and_input():
    @timeouts.names_collective("gather")
    def gather(data):
        with timeouts.named_collective("inner barrier"):  # nested: not a collective of its own
            return data

    line = sys._getframe().f_lineno + 1
    gather(torch.ones(4, 2, dtype=torch.float16))
    (entry,) = collective_log.entries()
    assert (entry.operation, entry.sequence) == ("gather", 1)
    assert entry.filename == __file__ and entry.lineno == line
    assert entry.as_dict()["input"] == "float16[4, 2]"
    assert (
        entry.as_dict()["function"]
        == "test_an_outermost_collective_is_logged_with_the_callers_line_and_input"
    )
    assert collective_log.current() is None  # it returned
    assert entry.label() == f"gather #1 at {os.path.basename(__file__)}:{line}"


def test_the_collective_in_flight_is_current_and_the_ring_keeps_the_last_ones():
    seen = []
    for _ in range(collective_log.CAPACITY + 5):
        with timeouts.named_collective("wait_for_everyone", [1, 2, 3]):
            seen.append(collective_log.current())
    entries = collective_log.entries()
    assert len(entries) == collective_log.CAPACITY
    assert entries[-1].sequence == collective_log.CAPACITY + 5 == collective_log.sequence()
    assert seen[-1] is entries[-1]
    assert entries[-1].as_dict()["input"] == "list of 3"


def test_a_failed_collective_is_left_too():
    with pytest.raises(ValueError), timeouts.named_collective("reduce"):
        raise ValueError("not a collective error")
    assert collective_log.current() is None
    assert collective_log.progress == 2  # entered and left


def test_the_record_costs_a_few_microseconds():
    data = torch.ones(256)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(2000):
            collective_log.leave(collective_log.enter("gather", data, 1))
        best = min(best, (time.perf_counter() - started) / 2000)
    assert best < 50e-6, f"{best * 1e6:.1f} us per record"  # a loose bound for loaded CI machines


def test_a_report_names_the_main_threads_line_and_the_collective_in_flight(tmp_path, monkeypatch):
    monkeypatch.setattr(diagnosis, "_folder", str(tmp_path))
    monkeypatch.setattr(diagnosis, "_rank", 3)
    with timeouts.named_collective("broadcast", torch.zeros(2, dtype=torch.int64)):
        line = sys._getframe().f_lineno + 1
        diagnosis.write_report("asked by the launcher")
    report = json.loads((tmp_path / "rank3.json").read_text())
    assert report["rank"] == 3 and report["sequence"] == 1
    assert report["current"]["operation"] == "broadcast" and report["current"]["input"] == "int64[2]"
    assert report["where"]["line"] == line and report["where"]["file"] == __file__
    assert report["threads"][0]["main"]


def _installed_engine(tmp_path, monkeypatch):  # noqa: ANN001, ANN202
    """Import a module that lives in a site-packages folder, as an engine such as DeepSpeed does."""
    library = tmp_path / "lib" / "site-packages"
    library.mkdir(parents=True)
    (library / "fake_engine.py").write_text(
        "def all_reduce(call):\n    return call()\n\n"
        "def wait():\n    raise RuntimeError('Timed out waiting 10000ms for recv operation to complete')\n"
    )
    monkeypatch.syspath_prepend(str(library))
    monkeypatch.delitem(sys.modules, "fake_engine", raising=False)
    import fake_engine

    return fake_engine


def test_a_report_names_the_scripts_line_not_an_installed_engines(tmp_path, monkeypatch):
    monkeypatch.setattr(diagnosis, "_folder", str(tmp_path))
    monkeypatch.setattr(diagnosis, "_rank", 0)
    engine = _installed_engine(tmp_path, monkeypatch)
    line = sys._getframe().f_lineno + 1
    engine.all_reduce(lambda: diagnosis.write_report("asked by the launcher"))
    live = json.loads((tmp_path / "rank0.json").read_text())["where"]
    assert (live["file"], live["line"]) == (__file__, line)

    try:
        line = sys._getframe().f_lineno + 1
        engine.all_reduce(engine.wait)
    except RuntimeError as error:
        report = diagnosis.build_report("raised", error, error.__traceback__)
    assert (report["where"]["file"], report["where"]["line"]) == (__file__, line)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_the_signal_is_answered_by_the_thread_even_while_the_main_thread_is_blocked(tmp_path, monkeypatch):
    import subprocess

    code = f"""
import os, signal, time
os.environ[{env_vars.DIAGNOSIS_DIR!r}] = {str(tmp_path)!r}
from accel_state.process_group import diagnosis
diagnosis.install(0)
print("ready", flush=True)
import threading
threading.Event().wait(30)  # blocked in C, as in a collective: no Python handler runs here
"""
    script = tmp_path / "blocked.py"
    script.write_text(code)
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        assert (tmp_path / "rank0.pid").read_text() == str(process.pid)
        time.sleep(0.5)  # into the wait
        os.kill(process.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not (tmp_path / "rank0.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        report = json.loads((tmp_path / "rank0.json").read_text())
        assert report["where"]["code"].startswith("threading.Event().wait(30)")
    finally:
        process.kill()
        process.wait()


def test_nothing_is_installed_outside_accel_launch(monkeypatch):
    monkeypatch.delenv(env_vars.DIAGNOSIS_DIR, raising=False)
    before = signal.getsignal(signal.SIGUSR1)
    names = {thread.name for thread in threading.enumerate()}
    diagnosis.install(0)
    assert signal.getsignal(signal.SIGUSR1) == before
    assert "accel-diagnosis" not in names | {thread.name for thread in threading.enumerate()}
