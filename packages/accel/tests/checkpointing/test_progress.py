"""A long save_state/load_state shows a progress bar of the bytes written or read, on a terminal only."""

from __future__ import annotations

import io

import pytest
import torch

from accel import Accelerator
from accel_launch.checkpoints import progress

pytest.importorskip("tqdm", reason="the progress bar is tqdm's: not installed here")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _prepared():
    accelerator = Accelerator()
    model = torch.nn.Linear(256, 256)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 256)).sum().backward()
    optimizer.step()
    return accelerator, *accelerator.prepare(model, optimizer)


def _bars(monkeypatch) -> list:
    """Record every Progress that save_state and load_state make."""
    made = []

    class Recorded(progress.Progress):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr("accel.checkpointing.save_load.Progress", Recorded)
    return made


def test_a_terminal_sees_the_bytes_of_a_save_and_of_a_load(tmp_path, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)  # every save counts as long
    bars = _bars(monkeypatch)
    accelerator, _, _ = _prepared()
    folder = accelerator.save_state(tmp_path / "c")
    accelerator.load_state(folder)
    assert [bar.what for bar in bars] == ["save_state", "load_state"]
    assert all(bar.shown is False for bar in bars), "closed once done"
    files = {p.name: p.stat().st_size for p in (tmp_path / "c").iterdir()}
    big = files["model.safetensors"] + files["optimizer.bin"]
    save, load = bars
    assert big <= save.done_bytes <= sum(files.values()), (save.done_bytes, files)
    assert big <= load.done_bytes <= sum(files.values()), (load.done_bytes, files)
    assert "save_state" in terminal.getvalue() and "load_state" in terminal.getvalue()


def test_nothing_is_shown_off_a_terminal_or_when_turned_off(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)
    monkeypatch.setattr("sys.stderr", io.StringIO())  # a log file, a pipe
    accelerator, _, _ = _prepared()
    accelerator.load_state(accelerator.save_state(tmp_path / "a"))
    assert "save_state" not in __import__("sys").stderr.getvalue()
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setenv("ACCEL_PROGRESS", "0")
    accelerator.load_state(accelerator.save_state(tmp_path / "b"))
    assert terminal.getvalue() == ""


def test_a_short_save_prints_nothing_on_a_terminal(tmp_path, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    accelerator, _, _ = _prepared()
    accelerator.load_state(accelerator.save_state(tmp_path / "c"))
    assert terminal.getvalue() == ""  # well under DELAY_SECONDS
