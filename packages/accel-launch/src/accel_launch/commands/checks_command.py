"""`accel test`: run the diagnostic checks registered as a test script (the umbrella's) on the
configured setup, launched as `accel launch` would."""

from __future__ import annotations

import importlib.util
import sys

import click

from accel_launch.commands.common import CONTEXT, ConfigProblem, config_file_option
from accel_launch.commands.launch_command import launch_options, run

# What `accel test` runs: a module registered under this entry-point group (the umbrella's checks).
TEST_SCRIPT_GROUP = "accel.test_scripts"


@click.command("test", context_settings=CONTEXT)
@config_file_option
@click.pass_context
def test_command(ctx: click.Context, config_file: str | None) -> None:
    """Run the diagnostic checks (the umbrella's, registered as a test script) on the configured setup;
    exit 0 if all pass."""
    module = _test_script()
    if module is None or importlib.util.find_spec(module.partition(".")[0]) is None:
        raise ConfigProblem(
            "accel test runs the checks of the `accel` package, which is not installed; from the repository "
            "root: pip install -c constraints.txt ./packages/accel-state ./packages/accel-data "
            "./packages/accel-amp ./packages/accel-launch ./packages/accel-big-modeling ./packages/accel"
        )
    defaults = {"max_restarts": 0, "monitor_interval": 0.1, "module": True, "env_pairs": (), "log_dir": None}
    options = launch_options(ctx, {"config_file": config_file, "tee": None, **defaults})
    click.echo(f"accel test: running {module} on {options.num_processes} process(es)", err=True)
    sys.exit(run(options, module, []))


def _test_script() -> str | None:
    """Return the module registered for `accel test` (entry-point group TEST_SCRIPT_GROUP), if any."""
    from accel_state.seam.entry_points import entry_points

    found = entry_points(TEST_SCRIPT_GROUP)
    return found[0].module if found else None
