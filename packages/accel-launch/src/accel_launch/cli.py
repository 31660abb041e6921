"""The `accel` command line (a click group) and the standalone `accel-launch` command.

Only click and this package's light modules are imported here; torch and accel_state are imported
inside the command bodies, so `accel --help` stays fast.
"""

from __future__ import annotations

import sys

import click

from accel_launch.__about__ import __version__
from accel_launch.launch_options import (
    MIXED_PRECISION_CHOICES,
    LaunchOptions,
    LaunchOptionsError,
    check_script,
    parse_env_pairs,
)

_CONTEXT = {"help_option_names": ["-h", "--help"]}
# Everything from the script on belongs to the script: stop parsing our flags at the first positional.
_LAUNCH_CONTEXT = {**_CONTEXT, "ignore_unknown_options": True, "allow_interspersed_args": False}


def _flag(name: str, *short: str, dest: str | None = None) -> list[str]:
    """Return click's declarations for both spellings of a flag (`--num_processes`, `--num-processes`)."""
    spellings = [f"--{name}"]
    if "_" in name:
        spellings.append(f"--{name.replace('_', '-')}")
    return [*short, *spellings, dest or name]


@click.group(context_settings=_CONTEXT)
@click.version_option(__version__, "--version", prog_name="accel")
def accel() -> None:
    """accel: run training scripts on one or many processes and machines."""


@accel.command(context_settings=_LAUNCH_CONTEXT)
@click.option(*_flag("cpu"), is_flag=True, help="Train on the CPU even where an accelerator exists.")
@click.option(
    *_flag("num_processes"),
    type=int,
    default=1,
    show_default=True,
    help="Processes to start on this machine.",
)
@click.option(
    *_flag("num_machines"), type=int, default=1, show_default=True, help="Machines taking part in the job."
)
@click.option(
    *_flag("machine_rank"),
    type=int,
    default=0,
    show_default=True,
    help="Rank of this machine, 0 for the one at --main_process_ip.",
)
@click.option(
    *_flag("main_process_ip"),
    type=str,
    default=None,
    help="Address of machine 0 (required with several machines; 127.0.0.1 otherwise).",
)
@click.option(
    *_flag("main_process_port"),
    type=int,
    default=None,
    help="Rendezvous port on machine 0 (default: a free port on one machine, 29500 on several).",
)
@click.option(
    *_flag("mixed_precision"),
    type=click.Choice(MIXED_PRECISION_CHOICES),
    default=None,
    help="Mixed precision for the Accelerator.",
)
@click.option(
    *_flag("gradient_accumulation_steps"),
    type=int,
    default=None,
    help="Batches to accumulate before an optimizer step.",
)
@click.option(
    *_flag("debug"),
    is_flag=True,
    help="Check collective shapes across ranks; show the launcher's traceback on its own errors.",
)
@click.option(
    *_flag("max_restarts"),
    type=int,
    default=0,
    show_default=True,
    help="Restarts of the whole worker group after a failure before giving up.",
)
@click.option(
    *_flag("monitor_interval"),
    type=float,
    default=0.1,
    show_default=True,
    help="Seconds between checks of the workers (how fast a crashed rank is noticed).",
)
@click.option(*_flag("module", "-m"), is_flag=True, help="Run SCRIPT as a module, like `python -m`.")
@click.option(
    *_flag("env", dest="env_pairs"),
    multiple=True,
    metavar="KEY=VALUE",
    help="Set an environment variable in every worker (repeatable).",
)
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def launch(
    ctx: click.Context, script: str, script_args: tuple[str, ...], env_pairs: tuple[str, ...], **flags: object
) -> None:
    """Run SCRIPT [SCRIPT_ARGS]... on every process through torch.distributed.run."""
    if script.startswith("-"):
        # ignore_unknown_options turns an unknown flag into a positional, so a mistyped flag of ours
        # arrives here in the script's place.
        known = [opt for param in ctx.command.params for opt in getattr(param, "opts", [])]
        raise click.NoSuchOption(script, possibilities=known, ctx=ctx)
    try:
        options = LaunchOptions(env=parse_env_pairs(env_pairs), **flags)  # type: ignore[arg-type]
        check_script(script, options.module)
    except LaunchOptionsError as error:
        raise click.UsageError(str(error)) from None

    from accel_launch.runner import run_torchrun
    from accel_launch.torchrun_args import build_torchrun_call

    call = build_torchrun_call(options, script, script_args)
    sys.exit(run_torchrun(call.argv, call.env, debug=options.debug))


def main() -> None:
    """Entry point of the `accel` console script."""
    accel(prog_name="accel")


def launch_main() -> None:
    """Entry point of the `accel-launch` console script: the launch command on its own."""
    launch(prog_name="accel-launch")


if __name__ == "__main__":
    main()
