"""The `accel` command line (a click group) and the standalone `accel-launch` command.

The group is lazy (click's LazyGroup pattern): it knows its commands' names and one-line help from
a static table and imports a command's module only to run it or show its own help. So `accel --help`
imports click alone, not the config schema, the launch hooks or the launch options, whose flags
`accel launch` and `accel config show` build one per config key. The commands live in their own
modules of this folder; their names stay importable from here (PEP 562), loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import click

from accel_launch.__about__ import __version__
from accel_launch.commands.common import CONTEXT


class LazyCommand(NamedTuple):
    """Where a command of the group lives, and its help's first paragraph for the group's listing."""

    module: str
    attribute: str
    summary: str


# The group's commands, in `accel --help`'s order. The summaries are the commands' own first
# paragraphs (a test checks they agree), so the listing needs no command imported.
COMMANDS: dict[str, LazyCommand] = {
    "config": LazyCommand(
        "accel_launch.commands.config_commands",
        "config",
        "Ask questions about this machine and write the config file (or run a subcommand).",
    ),
    "env": LazyCommand(
        "accel_launch.commands.env_command",
        "env_command",
        "Print versions, platform, devices and the effective config, for a bug report.",
    ),
    "estimate-memory": LazyCommand(
        "accel_launch.commands.estimate_command",
        "estimate_memory_command",
        "Estimate a model's memory in each dtype, its largest layer, and training with AdamW.",
    ),
    "launch": LazyCommand(
        "accel_launch.commands.launch_command",
        "launch",
        "Run SCRIPT [SCRIPT_ARGS]... on every process through torch.distributed.run (or on every "
        "replica as the job's engine starts them).",
    ),
    "merge-weights": LazyCommand(
        "accel_launch.commands.merge_weights_command",
        "merge_weights_command",
        "Merge a sharded checkpoint (SHARDED_STATE_DICT) into one set of weights: model.safetensors.",
    ),
    "plot": LazyCommand(
        "accel_launch.commands.plot_command",
        "plot_command",
        "Draw the metrics of one or more runs side by side: a panel per metric, a line per run.",
    ),
    "test": LazyCommand(
        "accel_launch.commands.checks_command",
        "test_command",
        "Run the diagnostic checks (the umbrella's, registered as a test script) on the configured "
        "setup; exit 0 if all pass.",
    ),
}
# Commands an installed package registers (`[project.entry-points."accel.commands"]`, `name =
# "module:attribute"`): listed beside COMMANDS, imported when run or when `accel --help` lists them.
REGISTERED_GROUP = "accel.commands"

# Names this module exported when it held the commands, and the module each lives in now.
_HOMES = {
    "launch": "accel_launch.commands.launch_command",
    "config": "accel_launch.commands.config_commands",
    "config_default": "accel_launch.commands.config_commands",
    "config_show": "accel_launch.commands.config_commands",
    "NO_TERMINAL_MESSAGE": "accel_launch.commands.config_commands",
    "test_command": "accel_launch.commands.checks_command",
    "TEST_SCRIPT_GROUP": "accel_launch.commands.checks_command",
    "env_command": "accel_launch.commands.env_command",
    "plot_command": "accel_launch.commands.plot_command",
    "ConfigProblem": "accel_launch.commands.common",
    "config_key_options": "accel_launch.commands.config_options",
    "load_effective_config": "accel_launch.commands.config_options",
}


class LazyGroup(click.Group):
    """A click group whose COMMANDS are imported when run or asked for their own help, not listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *registered_commands(), *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        lazy = COMMANDS.get(cmd_name)
        where = (lazy.module, lazy.attribute) if lazy is not None else registered_commands().get(cmd_name)
        if where is None:
            return None
        command = getattr(importlib.import_module(where[0]), where[1])
        if not isinstance(command, click.Command):
            raise TypeError(f"{where[0]}.{where[1]} is not a click command (accel {cmd_name})")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write the Commands section as click's Group does, from the summaries of commands not loaded."""
        commands = []
        for name in self.list_commands(ctx):
            lazy = COMMANDS.get(name)
            command = self.commands.get(name)
            if command is None:
                command = click.Command(name, help=lazy.summary) if lazy else self.get_command(ctx, name)
            if command is None:
                continue
            if not command.hidden:
                commands.append((name, command))
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            rows = [(name, command.get_short_help_str(limit)) for name, command in commands]
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def registered_commands() -> dict[str, tuple[str, str]]:
    """Return {name: (module, attribute)} of the commands installed packages register (REGISTERED_GROUP)."""
    from accel_state.seam.entry_points import entry_points

    found: dict[str, tuple[str, str]] = {}
    for entry in entry_points(REGISTERED_GROUP):
        if entry.attribute and entry.name not in COMMANDS:
            found.setdefault(entry.name, (entry.module, entry.attribute))
    return found


@click.group(cls=LazyGroup, context_settings=CONTEXT)
@click.version_option(__version__, "--version", prog_name="accel")
def accel() -> None:
    """accel: run training scripts on one or many processes and machines."""


def main() -> None:
    """Entry point of the `accel` console script."""
    accel(prog_name="accel")


def launch_main() -> None:
    """Entry point of the `accel-launch` console script: the launch command on its own."""
    from accel_launch.commands.launch_command import launch

    launch(prog_name="accel-launch")


def __getattr__(name: str) -> Any:
    from accel_state.lazy_exports import lazy_attribute

    return lazy_attribute(__name__, _HOMES, name)


def __dir__() -> list[str]:
    from accel_state.lazy_exports import lazy_dir

    return lazy_dir(__name__, _HOMES)


if __name__ == "__main__":
    main()
