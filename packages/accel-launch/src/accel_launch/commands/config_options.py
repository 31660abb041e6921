"""The flags built from the config schema (one per key, each launch hook's selector and section keys),
and the effective config they override, shared by `accel launch`, `accel config show` and `accel test`.

Importing this module imports the schema, which loads the launch hooks: only the commands that need
the flags import it, so `accel --help` does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from accel_launch.commands.common import ConfigProblem, flag
from accel_launch.config.schema import (
    DYNAMO_KEYS,
    HOOKS,
    KEYS,
    PARALLELISM_SWITCH,
    SECTION_SETTINGS,
    SETTINGS,
    ConfigError,
    ConfigKey,
)
from accel_state.seam.launch_hook import LaunchHook, LaunchHookError, Selector


def fail(error: LaunchHookError) -> click.ClickException:
    """Return the click error for `error`: a flag's reads like click's own; a file's names the file."""
    message = str(error)
    if message.startswith("--"):
        return click.UsageError(message)
    return ConfigProblem(message)


def _key_option(key: ConfigKey, *, switch: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Return the click option for config key `key` (default None: "not given", so the file applies).

    A boolean key is a `--x/--no_x` switch, or with `switch=False` a flag taking true/false.
    """
    default = f" [default: {key.default}]" if key.default not in (None, "") else ""
    help_text = f"{key.help}{default}"
    if key.kind == "bool" and not switch:
        return click.option(
            *flag(key.name), type=click.BOOL, default=None, metavar="true|false", help=help_text
        )
    if key.kind == "bool":
        names = [*key.aliases, key.name]
        declarations = []
        for name in names:
            declarations.append(f"--{name}/--no_{name}")
            if "_" in name:
                dashed = name.replace("_", "-")
                declarations.append(f"--{dashed}/--no-{dashed}")
        return click.option(*declarations, key.name, default=None, help=help_text)
    kinds: dict[str, Any] = {"int": int, "float": float, "str": str}
    click_type = click.Choice(key.choices) if key.kind == "choice" else kinds[key.kind]
    return click.option(*flag(key.name), type=click_type, default=None, help=help_text)


def _selector_option(selector: Selector) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Return the click switch of a launch hook's selector (`--use_x`, `--use-x`)."""
    declarations = [spelling for name in selector.names for spelling in flag(name)[:-1]]
    return click.option(*declarations, selector.parameter, is_flag=True, default=False, help=selector.help)


def _adapter_flag_option(hook: LaunchHook, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Return a hidden option for flag `name` of the adapter a stand-in hook stands for: given, it is
    refused with the adapter's install line (without the adapter the flag has no meaning here)."""

    def refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            raise click.UsageError(f"--{name} is {hook.article} {hook.title} option. {hook.install_hint}")

    return click.option(*flag(name)[:-1], hidden=True, expose_value=False, default=None, callback=refuse)


def config_key_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add one flag per scalar config key to a command (in the table's order in `--help`), then
    --use_parallelism_config and each launch hook's selector, then the section flags (the
    parallelism sizes, the hooks' keys), which take a value as Accelerate's do (torch.compile's
    are switches, as Accelerate's), and (hidden) the
    flags of adapters that are not installed."""
    options = [_key_option(key) for key in KEYS.values() if key.has_flag]
    options.append(_key_option(PARALLELISM_SWITCH))
    options += [_selector_option(hook.selector) for hook in HOOKS.values() if hook.selector is not None]
    # torch.compile's are switches, as Accelerate's (`--dynamo_use_fullgraph`).
    options += [_key_option(key, switch=key.name in DYNAMO_KEYS) for key in SECTION_SETTINGS.values()
                if key.has_flag]  # fmt: skip
    options += [_adapter_flag_option(hook, name) for hook in HOOKS.values() if hook.stand_in
                for name in hook.adapter_flags]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


def given_flags(ctx: click.Context, values: dict[str, Any]) -> dict[str, Any]:
    """Return the config-key flags given on the command line (a hook's selector as distributed_type)."""
    given = {
        name: value
        for name, value in values.items()
        if name in SETTINGS and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
    }
    for hook in HOOKS.values():
        selector = hook.selector
        if selector is None or not values.get(selector.parameter):
            continue
        if ctx.get_parameter_source(selector.parameter) != ParameterSource.COMMANDLINE:
            continue
        kind = hook.distributed_types[0]
        chosen = given.get("distributed_type")
        if chosen not in (None, kind):
            raise click.UsageError(f"--{selector.names[0]} contradicts --distributed_type {chosen}")
        given["distributed_type"] = kind
    return given


def load_effective_config(config_file: str | None, flags: dict[str, Any]) -> tuple[Any, bool]:
    """Return (the effective config, whether a file was read); raise a click error for bad input."""
    from accel_launch.config.effective import resolve_config
    from accel_launch.config.file import locate_config, read_config

    try:
        location = locate_config(config_file)
        file_values = read_config(location)
        return resolve_config(file_values, flags, path=location.path), file_values is not None
    except ConfigError as error:
        raise fail(error) from None
