"""The native backend's launch hook: one process, or many on CPUs or GPUs of one or several
machines, all started through torch's elastic agent (the launcher's torchrun arguments).

It has no flag or section of its own: the top-level keys (process and machine counts, the
rendezvous) are every job's.
"""

from __future__ import annotations

from accel_state.seam.launch_hook import JobConfig, LaunchHook, LaunchHookError


def check_one_process(config: JobConfig) -> None:
    """Raise LaunchHookError when distributed_type NO (one process) is given with several."""
    if config.given("distributed_type") != "NO":
        return
    processes, machines = config["num_processes"], config["num_machines"]
    if processes * machines > 1:
        culprit = "num_processes" if processes > 1 else "num_machines"
        raise LaunchHookError(
            f"{config.where('distributed_type')} is NO (one process) but {config.where(culprit)} is "
            f"{config[culprit]}; use MULTI_CPU or MULTI_GPU"
        )


HOOK = LaunchHook(
    name="NATIVE",
    title="native",
    distributed_types=("NO", "MULTI_CPU", "MULTI_GPU"),
    cpu_types=("NO", "MULTI_CPU"),
    check=check_one_process,
)
