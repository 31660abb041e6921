"""`accel launch` (also the standalone `accel-launch`): check the flags and the effective config, then
start the script on every process through torch.distributed.run, or on every replica as the job's
engine starts them.

Each engine's flags, checks and way of starting replicas come from its launch hook
(accel_state.seam.launch_hook): this module loops over the hooks and names no engine. torch and
yaml are imported inside the function bodies, so `accel launch --help` stays fast.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from accel_launch.commands.common import CONTEXT, config_file_option, flag
from accel_launch.commands.config_options import config_key_options, fail, given_flags, load_effective_config
from accel_launch.config.schema import ConfigError
from accel_launch.launch.options import (
    TEE_CHOICES,
    LaunchOptions,
    LaunchOptionsError,
    check_log_dir,
    check_script,
    parse_env_pairs,
)
from accel_state.seam.launch_hook import LaunchHookError, hook_for_type

# Everything from the script on belongs to the script: stop parsing our flags at the first positional.
_LAUNCH_CONTEXT = {**CONTEXT, "ignore_unknown_options": True, "allow_interspersed_args": False}


def _launch_only_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            *flag("max_restarts"),
            type=int,
            default=0,
            show_default=True,
            help="Restarts of the whole worker group after a failure before giving up.",
        ),
        click.option(
            *flag("monitor_interval"),
            type=float,
            default=0.1,
            show_default=True,
            help="Seconds between checks of the workers (how fast a crashed rank is noticed).",
        ),
        click.option(
            *flag("log_dir"),
            type=str,
            default=None,
            help="Folder for per-rank log files (torchrun's --log-dir).",
        ),
        click.option(
            *flag("tee", "-t"),
            type=click.Choice(TEE_CHOICES),
            default=None,
            help="Tee rank output into --log_dir files and the console: 1 stdout, 2 stderr, 3 both.",
        ),
        click.option(*flag("module", "-m"), is_flag=True, help="Run SCRIPT as a module, like `python -m`."),
        click.option(
            *flag("env", dest="env_pairs"),
            multiple=True,
            metavar="KEY=VALUE",
            help="Set an environment variable in every worker (repeatable).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.command(context_settings=_LAUNCH_CONTEXT)
@config_file_option
@config_key_options
@_launch_only_options
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def launch(ctx: click.Context, script: str, script_args: tuple[str, ...], **flags: Any) -> None:
    """Run SCRIPT [SCRIPT_ARGS]... on every process through torch.distributed.run (or on every
    replica as the job's engine starts them).

    Values come from the flags, else ACCEL_* env vars, else the config file, else the SLURM allocation
    it runs in (salloc, sbatch), else defaults.
    """
    if script.startswith("-"):
        # ignore_unknown_options turns an unknown flag into a positional, so a mistyped flag of ours
        # arrives here in the script's place.
        known = [opt for param in ctx.command.params for opt in getattr(param, "opts", [])]
        raise click.NoSuchOption(script, possibilities=known, ctx=ctx)
    options = launch_options(ctx, flags)
    try:
        check_script(script, options.module)
        check_log_dir(options.log_dir)
    except LaunchOptionsError as error:
        raise click.UsageError(str(error)) from None
    sys.exit(run(options, script, script_args))


def launch_options(ctx: click.Context, flags: dict[str, Any]) -> LaunchOptions:
    """Return the LaunchOptions of a launch-like command from its flags and the effective config."""
    import os

    from accel_launch.config.effective import check_launchable
    from accel_launch.config.parallelism import mesh_sizes
    from accel_launch.config.schema import dynamo_variables
    from accel_launch.launch.env_check import check_accel_env
    from accel_launch.launch.machine_limits import check_process_count

    config, _ = load_effective_config(flags.pop("config_file"), given_flags(ctx, flags))
    try:
        check_launchable(config)
        hook = hook_for_type(config.given("distributed_type"))
        hook.check_launch(config)
        distributed_type = config.given("distributed_type")
        options = LaunchOptions(
            cpu=bool(config["use_cpu"]) or distributed_type == "MULTI_CPU",
            num_processes=config["num_processes"],
            num_machines=config["num_machines"],
            machine_rank=config["machine_rank"],
            main_process_ip=config["main_process_ip"],
            main_process_port=config["main_process_port"],
            mixed_precision=config.given("mixed_precision"),
            gradient_accumulation_steps=config.given("gradient_accumulation_steps"),
            debug=bool(config["debug"]),
            rdzv_backend=config["rdzv_backend"],
            distributed_type=distributed_type,
            gpu_ids=config.given("gpu_ids"),
            downcast_bf16=bool(config["downcast_bf16"]),
            enable_cpu_affinity=bool(config["enable_cpu_affinity"]),
            dynamo_backend=config["dynamo_backend"],
            dynamo=dynamo_variables(config),
            engine_settings=hook.settings(config),
            parallelism=mesh_sizes(config),
            max_restarts=flags["max_restarts"],
            monitor_interval=flags["monitor_interval"],
            module=flags["module"],
            env=parse_env_pairs(flags["env_pairs"]),
            log_dir=flags["log_dir"],
            tee=flags["tee"],
            hang_timeout=config.given("hang_timeout"),
        )
        # What the ranks would choke on, or the machine could not start, is refused before anything starts.
        check_accel_env(os.environ)
        check_accel_env(options.env, where="--env")
        _warn_unknown_variables(options.env)
        _warn_partial_allocation()
        if hook.start_replicas is None:
            _check_port_free(options, config.where("main_process_port"))
        hook.check_options(options, os.environ)
        check_process_count(options.num_processes, where=config.where("num_processes"))
    except LaunchHookError as error:
        raise fail(error) from None
    return options


def _check_port_free(options: LaunchOptions, where: str) -> None:
    """Raise ConfigError when the rendezvous port asked for is taken here, before any rank starts.

    Only the machine that hosts the rendezvous store (machine 0, or this one alone) listens on it.
    """
    from accel_launch.rendezvous.ports import LOCALHOST, bind_error, is_loopback

    port = options.main_process_port
    if port is None or options.machine_rank != 0:
        return
    if options.is_multi_machine:
        host = ""  # the store listens on every interface
    else:
        given = options.main_process_ip
        host = given if given and is_loopback(given) else LOCALHOST
    error = bind_error(host, port)
    if error is not None:
        flag = "" if where.startswith("--") else " (or override it with --main_process_port)"
        raise ConfigError(
            f"{where} is {port}, but the rendezvous cannot listen on that port of {host or 'this machine'} "
            f"({error.strerror or error}): choose a free one{flag}, or leave it unset on one machine "
            "for a free port"
        )


def _warn_unknown_variables(env_pairs: dict[str, str]) -> None:
    """Warn, once for the whole job, of ACCEL_* variables accel does not read (the ranks stay quiet)."""
    import os

    from accel_state.environment import env_vars

    lines = env_vars.unknown_variable_messages(os.environ)
    lines += env_vars.unknown_variable_messages(env_pairs, where="--env")
    for line in lines:
        click.echo(f"accel: warning: {line}", err=True)


def _warn_partial_allocation() -> None:
    """Warn when this launch cannot span the SLURM allocation it runs in (else its size comes from
    the allocation)."""
    import os

    from accel_launch.config.slurm_allocation import allocation_warning

    line = allocation_warning(os.environ)
    if line is not None:
        click.echo(f"accel: warning: {line}", err=True)


def run(options: LaunchOptions, script: str, script_args: tuple[str, ...] | list[str]) -> int:
    """Start `script` as `options` say (torchrun, or the job's hook's replicas); return the exit code."""
    from accel_launch.config.effective import hook_of_type
    from accel_launch.launch import runner
    from accel_launch.launch.torchrun_args import build_replica_call, build_torchrun_call

    hook = hook_of_type(options.distributed_type)
    if hook is not None and hook.start_replicas is not None:
        call = build_replica_call(options, script, script_args)
        return runner.run_program(call.argv, call.env, debug=options.debug, job=f"{hook.title} job")
    call = build_torchrun_call(options, script, script_args)
    return runner.run_torchrun(call.argv, call.env, debug=options.debug)
