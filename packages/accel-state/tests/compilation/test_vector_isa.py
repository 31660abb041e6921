"""Inductor's check of the CPU's vector instructions runs ahead on threads, and inductor uses its answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

# In a process of its own with a fresh cache folder: the check runs once a process and its answers
# are cached in torch (another test's compile would have answered it already).
SCRIPT = textwrap.dedent(
    """
    from torch._inductor import cpu_vec_isa
    from accel_state.compilation.vector_isa import check_vector_isa_ahead

    assert check_vector_isa_ahead({"cpp.cxx": "clang++"}) == [], "another compiler: not checked ahead"
    threads = check_vector_isa_ahead({"epilogue_fusion": False})
    assert threads and all(thread.name == "accel-vector-isa-check" for thread in threads)
    assert check_vector_isa_ahead(None) == [], "once a process"
    for thread in threads:
        thread.join()

    def built_again(self, code):
        raise AssertionError(f"inductor built its {self} check again")

    cpu_vec_isa.VecISA.check_build = built_again
    print("answers:", [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()])
    """
)


@pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++")), reason="inductor's CPU check needs a C++ compiler"
)
def test_the_check_started_ahead_answers_inductors_own(tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "answers: [" in done.stdout
    assert any(tmp_path.rglob("*.so")), "the check built its programs into the cache folder"


@pytest.mark.parametrize("backend, expected", [("inductor", 1), ("aot_eager", 0)])
def test_compiling_a_cpu_model_with_inductor_starts_the_check(monkeypatch, backend, expected):
    import torch

    from accel_state.compilation import apply
    from accel_state.compilation.plugin import TorchDynamoPlugin

    calls: list[object] = []
    monkeypatch.setattr(apply, "check_vector_isa_ahead", lambda options: calls.append(options) or [])
    apply.compile_model(torch.nn.Linear(2, 2), TorchDynamoPlugin(backend=backend))
    assert len(calls) == expected
