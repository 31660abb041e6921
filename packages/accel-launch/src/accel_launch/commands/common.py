"""What every `accel` command shares and that needs only click: the context settings, a flag's two
spellings, `--config_file` and the one-line `accel: ...` error.

Light on purpose: `accel plot` and `accel env` import it without the config schema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

CONTEXT = {"help_option_names": ["-h", "--help"]}


class ConfigProblem(click.ClickException):
    """A bad config file, env var or combination: one `accel: ...` line on stderr, exit code 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"accel: {self.message}", err=True)


def flag(name: str, *short: str, dest: str | None = None) -> list[str]:
    """Return click's declarations for both spellings of a flag (`--num_processes`, `--num-processes`)."""
    spellings = [f"--{name}"]
    if "_" in name:
        spellings.append(f"--{name.replace('_', '-')}")
    return [*short, *spellings, dest or name]


def config_file_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--config_file` to a command."""
    return click.option(
        *flag("config_file"),
        type=str,
        default=None,
        help="Config file to read (default: $ACCEL_CONFIG_FILE, else the default config).",
    )(func)
