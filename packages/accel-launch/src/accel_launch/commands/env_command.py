"""`accel env`: the versions, platform, devices and effective config, for a bug report."""

from __future__ import annotations

import click

from accel_launch.commands.common import CONTEXT, config_file_option


@click.command("env", context_settings=CONTEXT)
@config_file_option
def env_command(config_file: str | None) -> None:
    """Print versions, platform, devices and the effective config, for a bug report."""
    from accel_launch.commands.config_options import load_effective_config
    from accel_launch.commands.env_report import environment_lines

    effective, found = load_effective_config(config_file, {})
    for line in environment_lines(effective, config_found=found):
        click.echo(line)
