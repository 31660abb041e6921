"""`accel to-fsdp2`: a config file's FSDP1 `fsdp_config:` section rewritten with FSDP2's keys.

Accelerate's `accelerate to-fsdp2`; the rewrite itself is `fsdp2_config`."""

from __future__ import annotations

from typing import Any

import click

from accel_launch.commands.common import CONTEXT, ConfigProblem, flag


class ToFsdp2Problem(ConfigProblem):
    """A config file that cannot be read or written: one `accel to-fsdp2: ...` line, exit code 2."""

    def show(self, file: Any = None) -> None:
        click.echo(f"accel to-fsdp2: {self.message}", err=True)


@click.command("to-fsdp2", context_settings=CONTEXT)
@click.option(*flag("config_file"), required=True, metavar="FILE", help="The FSDP1 config file to convert.")
@click.option(
    *flag("output_file"),
    default=None,
    metavar="FILE",
    help="Where to write the FSDP2 config (default with --overwrite: the config file itself).",
)
@click.option("--overwrite", is_flag=True, help="Replace the output file if it exists.")
def to_fsdp2_command(config_file: str, output_file: str | None, overwrite: bool) -> None:
    """Rewrite a config file's FSDP1 fsdp_config section with FSDP2's keys (fsdp_version 2).

    fsdp_sharding_strategy becomes fsdp_reshard_after_forward (FULL_SHARD and HYBRID_SHARD true,
    SHARD_GRAD_OP, NO_SHARD and HYBRID_SHARD_ZERO2 false); fsdp_backward_prefetch,
    fsdp_forward_prefetch, fsdp_sync_module_states and fsdp_use_orig_params are dropped (FSDP2
    behaves so whatever they say); the other keys and the rest of the file are kept. Each change is
    printed. The result is checked as `accel launch --config_file` reads it before it is written.
    """
    from accel_launch.config.schema import ConfigError
    from accel_launch.converters.fsdp2_config import convert_config_file

    try:
        target, rewrite = convert_config_file(config_file, output_file, overwrite)
    except ConfigError as error:
        raise ToFsdp2Problem(str(error)) from None
    for note in rewrite.notes:
        click.echo(f"accel to-fsdp2: {note}")
    done = "FSDP2 config" if rewrite.converted else "config"
    click.echo(f"accel to-fsdp2: wrote the {done} to {target}")
