"""The questions of `accel config`, and the no-question config of `accel config default`.

Both return a plain dict of config keys; writing it is config_file's job. The distributed types
offered are those of the launch hooks that say so; a hook's questions fill its section. A job of
several processes is asked about a parallelism config; `accel config default` writes none.
"""

from __future__ import annotations

from typing import Any

import click

from accel_launch.config.parallelism import setting_of
from accel_launch.config.schema import (
    COMPUTE_ENVIRONMENTS,
    DYNAMO_SECTION,
    HOOKS,
    PARALLELISM_DIMENSIONS,
    PARALLELISM_SECTION,
    RDZV_BACKENDS,
    SECTIONS,
)
from accel_state.compilation.plugin import MODES as DYNAMO_MODES
from accel_state.compilation.plugin import DynamoBackend
from accel_state.environment.choices import DEFAULT_MASTER_PORT, MIXED_PRECISION_CHOICES
from accel_state.seam.launch_hook import LaunchHook, Question


def ask_config() -> dict[str, Any]:
    """Return the config built from the user's answers (click prompts with choices and defaults)."""
    config: dict[str, Any] = {
        "compute_environment": click.prompt(
            "In which compute environment are you running?",
            type=click.Choice(COMPUTE_ENVIRONMENTS[:1]),
            default="LOCAL_MACHINE",
        )
    }
    offered = [kind for hook in HOOKS.values() if hook.offered_by_config for kind in hook.distributed_types]
    distributed_type = click.prompt(
        "Which type of machine are you using?", type=click.Choice(offered), default="NO"
    )
    config["distributed_type"] = distributed_type
    config.update(num_machines=1, machine_rank=0, num_processes=1)
    if distributed_type != "NO":
        config.update(_ask_machines())
        config["num_processes"] = click.prompt(
            "How many processes in total on this machine?",
            type=click.IntRange(min=1),
            default=2 if distributed_type == "MULTI_CPU" else 1,
        )
    hook = next(hook for hook in HOOKS.values() if distributed_type in hook.distributed_types)
    if hook.section is not None and hook.questions:
        config[hook.section] = _ask_section(hook, config)
    if distributed_type == "MULTI_GPU":
        config["use_cpu"] = False
        config["gpu_ids"] = click.prompt(
            "Which GPUs (by id) should be used on this machine, as a comma-separated list?", default="all"
        )
    elif distributed_type == "MULTI_CPU":
        config["use_cpu"] = True
    else:
        config["use_cpu"] = click.confirm(
            "Do you want to run your training on the CPU only (even if a GPU is available)?", default=False
        )
    world_size = config["num_processes"] * config["num_machines"]
    if world_size > 1 and click.confirm(
        "Do you want to lay the processes out on an N-D mesh with a parallelism config "
        "(data-parallel replicate/shard, tensor and context parallel sizes)?",
        default=False,
    ):
        config[PARALLELISM_SECTION] = _ask_parallelism(world_size, cpu=bool(config["use_cpu"]))
    if click.confirm("Do you want to compile your models with torch.compile (dynamo)?", default=False):
        config[DYNAMO_SECTION] = _ask_dynamo()
    config["debug"] = click.confirm(
        "Should distributed operations be checked while running for errors (shape checks, slower)?",
        default=False,
    )
    config["mixed_precision"] = click.prompt(
        "Do you wish to use mixed precision?", type=click.Choice(MIXED_PRECISION_CHOICES), default="no"
    )
    config["gradient_accumulation_steps"] = click.prompt(
        "How many batches should gradients be accumulated over before an optimizer step?",
        type=click.IntRange(min=1),
        default=1,
    )
    return config


def _ask_parallelism(world_size: int, *, cpu: bool) -> dict[str, int]:
    """Return the parallelism_config section: the sizes asked, the shard size defaulting to the rest
    of the world size so that the product fits it. On the CPU the context-parallel size is 1."""
    sizes = {
        "dp_replicate": _ask_size("How many data-parallel replicas (whole copies of the model)?", 1),
        "tp": _ask_size("What tensor-parallel size (processes each layer is split over)?", 1),
    }
    # torch's context parallel needs CUDA attention kernels: not asked on the CPU.
    cp_prompt = "What context-parallel size (processes each sequence is split over)?"
    sizes["cp"] = 1 if cpu else _ask_size(cp_prompt, 1)
    rest = sizes["dp_replicate"] * sizes["tp"] * sizes["cp"]
    sizes["dp_shard"] = _ask_size(
        f"What data-parallel shard size (the sizes must multiply to the world size, {world_size})?",
        world_size // rest if world_size % rest == 0 else 1,
    )
    return {setting_of(dimension): sizes[dimension] for dimension in PARALLELISM_DIMENSIONS}


def _ask_dynamo() -> dict[str, Any]:
    """Return the dynamo_config section (Accelerate's keys) from the answers."""
    backends = [backend.value.lower() for backend in DynamoBackend if backend is not DynamoBackend.NO]
    return {
        "dynamo_backend": click.prompt(
            "Which torch.compile backend?", type=click.Choice(backends), default="inductor"
        ),
        "dynamo_mode": click.prompt("Which mode?", type=click.Choice(DYNAMO_MODES), default="default"),
        "dynamo_use_fullgraph": click.confirm(
            "Compile each model as one graph (no graph breaks)?", default=False
        ),
        "dynamo_use_dynamic": click.confirm("Compile for dynamic shapes?", default=False),
        "dynamo_use_regional_compilation": click.confirm(
            "Compile each repeated block once (regional compilation: much faster to compile)?", default=False
        ),
    }


def _ask_size(prompt: str, default: int) -> int:
    return int(click.prompt(prompt, type=click.IntRange(min=1), default=default))


def _ask_section(hook: LaunchHook, config: dict[str, Any]) -> dict[str, Any]:
    """Return `hook`'s section from the answers to its questions (those that apply, in order)."""
    section: dict[str, Any] = {}
    keys = SECTIONS.get(str(hook.section), {})
    for question in hook.questions:
        if not question.when(section, config):
            continue
        answer = _ask(question)
        if question.optional and answer == "":
            continue
        key = keys.get(question.key)
        section[question.key] = int(answer) if key is not None and key.kind == "int" else answer
    return section


def _ask(question: Question) -> Any:
    if not question.prompt:
        return question.default
    if question.confirm:
        return click.confirm(question.prompt, default=question.default)
    if question.choices:
        return click.prompt(question.prompt, type=click.Choice(question.choices), default=question.default)
    shown = question.default not in (None, "")
    return click.prompt(question.prompt, default=question.default, show_default=shown).strip()


def _ask_machines() -> dict[str, Any]:
    num_machines = click.prompt(
        "How many different machines will you use?", type=click.IntRange(min=1), default=1
    )
    answers: dict[str, Any] = {"num_machines": num_machines}
    if num_machines == 1:
        return answers
    answers["machine_rank"] = click.prompt(
        "What is the rank of this machine?", type=click.IntRange(0, num_machines - 1), default=0
    )
    answers["main_process_ip"] = click.prompt("What is the IP address of the machine with rank 0?")
    answers["main_process_port"] = click.prompt(
        "What is the port of the machine with rank 0?",
        type=click.IntRange(1, 65535),
        default=DEFAULT_MASTER_PORT,
    )
    answers["rdzv_backend"] = click.prompt(
        "What rendezvous backend will you use?", type=click.Choice(RDZV_BACKENDS), default="static"
    )
    answers["same_network"] = click.confirm("Are all the machines on the same local network?", default=True)
    return answers


def basic_config(mixed_precision: str = "no", cuda_device_count: int = 0) -> dict[str, Any]:
    """Return a config for this machine without questions: every GPU, else one CPU process."""
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "machine_rank": 0,
        "num_machines": 1,
        "mixed_precision": mixed_precision,
        "rdzv_backend": "static",
        "same_network": True,
        "main_training_function": "main",
        "downcast_bf16": False,
        "enable_cpu_affinity": False,
        "gradient_accumulation_steps": 1,
    }
    if cuda_device_count > 1:
        config.update(
            distributed_type="MULTI_GPU", num_processes=cuda_device_count, use_cpu=False, gpu_ids="all"
        )
    elif cuda_device_count == 1:
        config.update(distributed_type="NO", num_processes=1, use_cpu=False, gpu_ids="all")
    else:
        config.update(distributed_type="NO", num_processes=1, use_cpu=True)
    return config
