"""The `accel test` payload on one process (the multi-process run is in integration-tests)."""

from __future__ import annotations

import pytest

from accel import Accelerator, diagnostics


def test_every_check_passes_on_one_cpu_process():
    results = diagnostics.run_checks(Accelerator(cpu=True))
    assert [name for name, _, _ in results] == [name for name, _ in diagnostics.CHECKS]
    failed = [(name, detail) for name, passed, detail in results if not passed]
    assert failed == []


def test_main_prints_one_line_per_check_and_exits_zero(capsys, monkeypatch):
    monkeypatch.setenv("ACCEL_USE_CPU", "1")
    assert diagnostics.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("PASS  ") for line in lines) == len(diagnostics.CHECKS)
    assert lines[-1] == f"accel test: all {len(diagnostics.CHECKS)} checks passed"


def test_a_failing_check_is_reported_and_fails_the_run(capsys, monkeypatch):
    def broken(accelerator):
        raise RuntimeError("deliberately broken")

    monkeypatch.setattr(diagnostics, "CHECKS", (*diagnostics.CHECKS[:1], ("broken", broken)))
    assert diagnostics.main() == 1
    out = capsys.readouterr().out
    assert "FAIL  broken: rank 0: RuntimeError: deliberately broken" in out
    assert "1 of 2 checks FAILED" in out


@pytest.mark.parametrize("check", [c for _, c in diagnostics.CHECKS], ids=[n for n, _ in diagnostics.CHECKS])
def test_each_check_returns_a_detail_line(check):
    detail = check(Accelerator(cpu=True))
    assert isinstance(detail, str) and "\n" not in detail
