"""Inductor's check of the CPU's vector instructions, started ahead so that it overlaps tracing.

Before its first CPU kernel, inductor builds a small C++ program for each vector instruction set the
CPU lists (AVX-512 VNNI, AVX-512, AVX2 on x86) to learn which ones its compiler can use, one after
the other, each build about 2 s; with a fresh cache folder (a first compile, a new machine) that is
6-8 s on the path of the first step, while a core sits idle. Started when `prepare` compiles a CPU
model, on threads of their own (each build is a compiler process, outside the GIL), the builds run
while dynamo traces the model, and inductor finds their results when it gets there (its own cache of
each instruction set's answer, and the built files behind a file lock). A warm cache makes them
cheap either way. Any failure here is left to inductor's own check, which runs as before.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable, Mapping
from typing import Any

_started = False
_start_lock = threading.Lock()


def check_vector_isa_ahead(options: Mapping[str, Any] | None) -> list[threading.Thread]:
    """Start inductor's instruction-set check on threads once a process; return the threads started.

    Nothing starts where the user's options choose the compiler or the answer (`cpp.cxx`,
    `cpp.vec_isa_ok`, ...): the check then differs from what the global settings would check.
    """
    global _started
    if any(str(name).startswith("cpp.") for name in options or {}):
        return []
    with _start_lock:
        if _started:
            return []
        _started = True
    targets: list[tuple[Callable[..., Any], tuple[Any, ...]]]
    try:
        from torch._inductor import config, cpu_vec_isa

        if config.cpp.vec_isa_ok is not None or config.is_fbcode():
            return []  # inductor takes the given answer and builds nothing
        if platform.machine() in ("x86_64", "AMD64"):
            flags = cpu_vec_isa.x86_isa_checker()
            candidates = [
                isa
                for isa in cpu_vec_isa.supported_vec_isa_list
                if all(flag in flags for flag in str(isa).split())
            ]
            targets = [(bool, (isa,)) for isa in candidates]  # each answer cached on its instance
        else:
            targets = [(cpu_vec_isa.valid_vec_isa_list, ())]
    except Exception:  # another torch's layout: inductor checks as before
        return []
    threads = [
        threading.Thread(target=_quietly, args=(call, args), name="accel-vector-isa-check")
        for call, args in targets
    ]
    for thread in threads:
        thread.start()
    return threads


def _quietly(call: Callable[..., Any], args: tuple[Any, ...]) -> None:
    # Non-daemon threads: an exit right after prepare waits for a build rather than leaving a
    # half-written library in the cache folder.
    try:
        call(*args)
    except Exception:  # inductor's own check, on the main thread, meets and reports it
        pass
