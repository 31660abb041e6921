"""`accel config` (the questionnaire), `accel config default` and `accel config show`."""

from __future__ import annotations

import sys
from typing import Any

import click

from accel_launch.commands.common import CONTEXT, ConfigProblem, config_file_option, flag
from accel_launch.commands.config_options import config_key_options, fail, given_flags, load_effective_config
from accel_launch.config.schema import KEYS, ConfigError

# `accel config` asks questions; without a terminal (and with no answers piped in) it cannot.
NO_TERMINAL_MESSAGE = (
    "accel config asks questions, but stdin is not a terminal and has no answers: run "
    "`accel config default [--config_file FILE]` to write a config without questions, or write the "
    "YAML yourself and pass it to `accel launch --config_file FILE`"
)


@click.group(context_settings=CONTEXT, invoke_without_command=True)
@config_file_option
@click.pass_context
def config(ctx: click.Context, config_file: str | None) -> None:
    """Ask questions about this machine and write the config file (or run a subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    from accel_launch.config.effective import resolve_config
    from accel_launch.config.file import locate_config, write_config
    from accel_launch.config.questionnaire import ask_config

    try:
        answers = ask_config()
    except click.Abort:
        if sys.stdin.isatty():
            raise  # Ctrl-C or Ctrl-D at a prompt: the user stopped on purpose
        click.echo()  # end the unanswered prompt's line
        raise ConfigProblem(NO_TERMINAL_MESSAGE) from None
    path = locate_config(config_file).path
    try:
        resolve_config(answers, {}, path=path, environ={})
        write_config(path, answers)
    except (ConfigError, OSError) as error:
        raise fail(ConfigError(str(error))) from None
    click.echo(f"accel: config written to {path}")


def _with_group_config_file(ctx: click.Context, own: str | None) -> str | None:
    """Return the subcommand's --config_file, else the one given to `accel config` before it."""
    group = ctx.parent.params.get("config_file") if ctx.parent is not None else None
    if own is not None and group is not None and own != group:
        raise click.UsageError(f"--config_file given twice: {group} (to accel config) and {own}")
    return own if own is not None else group


@config.command("default", context_settings=CONTEXT)
@config_file_option
@click.option(
    *flag("mixed_precision"),
    type=click.Choice(KEYS["mixed_precision"].choices),
    default="no",
    show_default=True,
    help="Mixed precision to write into the config.",
)
@click.option("--force", is_flag=True, help="Overwrite an existing config file.")
@click.pass_context
def config_default(ctx: click.Context, config_file: str | None, mixed_precision: str, force: bool) -> None:
    """Write a config for this machine without questions: every GPU, else one CPU process."""
    import torch

    config_file = _with_group_config_file(ctx, config_file)

    from accel_launch.config.file import locate_config, write_config
    from accel_launch.config.questionnaire import basic_config

    path = locate_config(config_file).path
    if path.exists() and not force:
        raise ConfigProblem(f"{path}: a config file already exists; not overwritten (use --force)")
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        write_config(path, basic_config(mixed_precision, cuda_count))
    except OSError as error:
        raise ConfigProblem(f"{path}: cannot write the config file ({error})") from None
    click.echo(f"accel: config written to {path}")


@config.command("show", context_settings=CONTEXT)
@config_file_option
@config_key_options
@click.pass_context
def config_show(ctx: click.Context, config_file: str | None, **flags: Any) -> None:
    """Print the effective config and where each value came from (default, file, env, flag)."""
    from accel_launch.commands.env_report import config_lines

    config_file = _with_group_config_file(ctx, config_file)
    effective, found = load_effective_config(config_file, given_flags(ctx, flags))
    state = "" if found else " (not found; defaults shown)"
    click.echo(f"config file: {effective.path}{state}")
    for line in config_lines(effective):
        click.echo(line)
