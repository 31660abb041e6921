"""The questions of `accel config`, and the no-question config of `accel config default`.

Both return a plain dict of config keys; writing it is config_file's job. DeepSpeed gets the
questions of its `deepspeed_config:` section; XLA questions belong to their own issue.
"""

from __future__ import annotations

from typing import Any

import click

from accel_launch.config_schema import COMPUTE_ENVIRONMENTS, DEEPSPEED_SECTION, RDZV_BACKENDS
from accel_state.environment.choices import (
    DEEPSPEED_OFFLOAD_DEVICES,
    DEFAULT_MASTER_PORT,
    LAUNCHABLE_DISTRIBUTED_TYPES,
    MIXED_PRECISION_CHOICES,
    ZERO_STAGES,
)


def ask_config() -> dict[str, Any]:
    """Return the config built from the user's answers (click prompts with choices and defaults)."""
    config: dict[str, Any] = {
        "compute_environment": click.prompt(
            "In which compute environment are you running?",
            type=click.Choice(COMPUTE_ENVIRONMENTS[:1]),
            default="LOCAL_MACHINE",
        )
    }
    distributed_type = click.prompt(
        "Which type of machine are you using?",
        type=click.Choice(LAUNCHABLE_DISTRIBUTED_TYPES),
        default="NO",
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
    if distributed_type == "DEEPSPEED":
        config[DEEPSPEED_SECTION] = _ask_deepspeed(config["num_machines"])
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


def _ask_deepspeed(num_machines: int) -> dict[str, Any]:
    """Return the `deepspeed_config:` section from the answers: a JSON file, or the ZeRO options."""
    section: dict[str, Any] = {}
    config_file = click.prompt(
        "Path to a DeepSpeed JSON config file (leave empty to answer the ZeRO questions instead)",
        default="",
        show_default=False,
    ).strip()
    if config_file:
        section["deepspeed_config_file"] = config_file
    else:
        stage = click.prompt(
            "Which ZeRO stage do you want to use?",
            type=click.Choice([str(stage) for stage in ZERO_STAGES]),
            default="2",
        )
        section["zero_stage"] = int(stage)
        if section["zero_stage"] >= 2:
            section["offload_optimizer_device"] = click.prompt(
                "Where should optimizer states be offloaded?",
                type=click.Choice(DEEPSPEED_OFFLOAD_DEVICES),
                default="none",
            )
        if section["zero_stage"] == 3:
            section["offload_param_device"] = click.prompt(
                "Where should parameters be offloaded?",
                type=click.Choice(DEEPSPEED_OFFLOAD_DEVICES),
                default="none",
            )
            section["zero3_init_flag"] = click.confirm(
                "Build models sharded across ranks (deepspeed.zero.Init)?", default=True
            )
            section["zero3_save_16bit_model"] = click.confirm(
                "Save models as one 16-bit state dict?", default=False
            )
    if num_machines > 1:
        section["deepspeed_multinode_launcher"] = "standard"  # the only one: torch's elastic agent
    return section


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
