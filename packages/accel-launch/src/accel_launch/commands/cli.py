"""The `accel` command line (a click group) and the standalone `accel-launch` command.

Only click, this package's light modules and accel_state's torch-free choices and launch hooks are
imported here; torch, the rest of accel_state and yaml are imported inside the command bodies, so
`accel --help` stays fast. Each engine's flags, checks and way of starting replicas come from its
launch hook (accel_state.seam.launch_hook): the commands loop over the hooks and name no engine.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from accel_launch.__about__ import __version__
from accel_launch.config.schema import HOOKS, KEYS, SECTION_SETTINGS, SETTINGS, ConfigError, ConfigKey
from accel_launch.launch.options import (
    TEE_CHOICES,
    LaunchOptions,
    LaunchOptionsError,
    check_log_dir,
    check_script,
    parse_env_pairs,
)
from accel_state.seam.launch_hook import LaunchHookError, Selector, hook_for_type

_CONTEXT = {"help_option_names": ["-h", "--help"]}
# Everything from the script on belongs to the script: stop parsing our flags at the first positional.
_LAUNCH_CONTEXT = {**_CONTEXT, "ignore_unknown_options": True, "allow_interspersed_args": False}
# What `accel test` runs: a module registered under this entry-point group (the umbrella's checks).
TEST_SCRIPT_GROUP = "accel.test_scripts"
# `accel config` asks questions; without a terminal (and with no answers piped in) it cannot.
NO_TERMINAL_MESSAGE = (
    "accel config asks questions, but stdin is not a terminal and has no answers: run "
    "`accel config default [--config_file FILE]` to write a config without questions, or write the "
    "YAML yourself and pass it to `accel launch --config_file FILE`"
)


class ConfigProblem(click.ClickException):
    """A bad config file, env var or combination: one `accel: ...` line on stderr, exit code 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"accel: {self.message}", err=True)


def _fail(error: LaunchHookError) -> click.ClickException:
    # A problem with a flag reads like click's own flag errors; one in a file or env var names that.
    message = str(error)
    if message.startswith("--"):
        return click.UsageError(message)
    return ConfigProblem(message)


def _flag(name: str, *short: str, dest: str | None = None) -> list[str]:
    """Return click's declarations for both spellings of a flag (`--num_processes`, `--num-processes`)."""
    spellings = [f"--{name}"]
    if "_" in name:
        spellings.append(f"--{name.replace('_', '-')}")
    return [*short, *spellings, dest or name]


def _key_option(key: ConfigKey, *, switch: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Return the click option for config key `key` (default None: "not given", so the file applies).

    A boolean key is a `--x/--no_x` switch, or with `switch=False` a flag taking true/false.
    """
    default = f" [default: {key.default}]" if key.default not in (None, "") else ""
    help_text = f"{key.help}{default}"
    if key.kind == "bool" and not switch:
        return click.option(
            *_flag(key.name), type=click.BOOL, default=None, metavar="true|false", help=help_text
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
    return click.option(*_flag(key.name), type=click_type, default=None, help=help_text)


def _selector_option(selector: Selector) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Return the click switch of a launch hook's selector (`--use_x`, `--use-x`)."""
    declarations = [spelling for name in selector.names for spelling in _flag(name)[:-1]]
    return click.option(*declarations, selector.parameter, is_flag=True, default=False, help=selector.help)


def config_key_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add one flag per scalar config key to a command (in the table's order in `--help`), then each
    launch hook's selector, then the hooks' section flags, which take a value as Accelerate's do."""
    options = [_key_option(key) for key in KEYS.values() if key.has_flag]
    options += [_selector_option(hook.selector) for hook in HOOKS.values() if hook.selector is not None]
    options += [_key_option(key, switch=False) for key in SECTION_SETTINGS.values() if key.has_flag]
    for option in reversed(options):
        func = option(func)
    return func


def _config_file_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        *_flag("config_file"),
        type=str,
        default=None,
        help="Config file to read (default: $ACCEL_CONFIG_FILE, else the default config).",
    )(func)


def _given_flags(ctx: click.Context, values: dict[str, Any]) -> dict[str, Any]:
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
        raise _fail(error) from None


@click.group(context_settings=_CONTEXT)
@click.version_option(__version__, "--version", prog_name="accel")
def accel() -> None:
    """accel: run training scripts on one or many processes and machines."""


def _launch_only_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            *_flag("max_restarts"),
            type=int,
            default=0,
            show_default=True,
            help="Restarts of the whole worker group after a failure before giving up.",
        ),
        click.option(
            *_flag("monitor_interval"),
            type=float,
            default=0.1,
            show_default=True,
            help="Seconds between checks of the workers (how fast a crashed rank is noticed).",
        ),
        click.option(
            *_flag("log_dir"),
            type=str,
            default=None,
            help="Folder for per-rank log files (torchrun's --log-dir).",
        ),
        click.option(
            *_flag("tee", "-t"),
            type=click.Choice(TEE_CHOICES),
            default=None,
            help="Tee rank output into --log_dir files and the console: 1 stdout, 2 stderr, 3 both.",
        ),
        click.option(*_flag("module", "-m"), is_flag=True, help="Run SCRIPT as a module, like `python -m`."),
        click.option(
            *_flag("env", dest="env_pairs"),
            multiple=True,
            metavar="KEY=VALUE",
            help="Set an environment variable in every worker (repeatable).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@accel.command(context_settings=_LAUNCH_CONTEXT)
@_config_file_option
@config_key_options
@_launch_only_options
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def launch(ctx: click.Context, script: str, script_args: tuple[str, ...], **flags: Any) -> None:
    """Run SCRIPT [SCRIPT_ARGS]... on every process through torch.distributed.run (or on every
    replica as the job's engine starts them).

    Values come from the flags, else ACCEL_* env vars, else the config file, else defaults.
    """
    if script.startswith("-"):
        # ignore_unknown_options turns an unknown flag into a positional, so a mistyped flag of ours
        # arrives here in the script's place.
        _refuse_an_adapter_flag(script)
        known = [opt for param in ctx.command.params for opt in getattr(param, "opts", [])]
        raise click.NoSuchOption(script, possibilities=known, ctx=ctx)
    options = _launch_options(ctx, flags)
    try:
        check_script(script, options.module)
        check_log_dir(options.log_dir)
    except LaunchOptionsError as error:
        raise click.UsageError(str(error)) from None
    sys.exit(_run(options, script, script_args))


def _refuse_an_adapter_flag(flag: str) -> None:
    """Refuse `flag` with the install line when it is a flag of an adapter that is not installed."""
    name = flag.lstrip("-").partition("=")[0]
    for hook in HOOKS.values():
        if hook.stand_in and name in hook.adapter_flags:
            raise click.UsageError(f"--{name} is {hook.article} {hook.title} option. {hook.install_hint}")


def _launch_options(ctx: click.Context, flags: dict[str, Any]) -> LaunchOptions:
    """Return the LaunchOptions of a launch-like command from its flags and the effective config."""
    import os

    from accel_launch.config.effective import check_launchable
    from accel_launch.launch.env_check import check_accel_env
    from accel_launch.launch.machine_limits import check_process_count

    config, _ = load_effective_config(flags.pop("config_file"), _given_flags(ctx, flags))
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
            engine_settings=hook.settings(config),
            max_restarts=flags["max_restarts"],
            monitor_interval=flags["monitor_interval"],
            module=flags["module"],
            env=parse_env_pairs(flags["env_pairs"]),
            log_dir=flags["log_dir"],
            tee=flags["tee"],
        )
        # What the ranks would choke on, or the machine could not start, is refused before anything starts.
        check_accel_env(os.environ)
        check_accel_env(options.env, where="--env")
        _warn_unknown_variables(options.env)
        if hook.start_replicas is None:
            _check_port_free(options, config.where("main_process_port"))
        hook.check_options(options, os.environ)
        check_process_count(options.num_processes, where=config.where("num_processes"))
    except LaunchHookError as error:
        raise _fail(error) from None
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


def _run(options: LaunchOptions, script: str, script_args: tuple[str, ...] | list[str]) -> int:
    from accel_launch.config.effective import hook_of_type
    from accel_launch.launch import runner
    from accel_launch.launch.torchrun_args import build_replica_call, build_torchrun_call

    hook = hook_of_type(options.distributed_type)
    if hook is not None and hook.start_replicas is not None:
        call = build_replica_call(options, script, script_args)
        return runner.run_program(call.argv, call.env, debug=options.debug, job=f"{hook.title} job")
    call = build_torchrun_call(options, script, script_args)
    return runner.run_torchrun(call.argv, call.env, debug=options.debug)


@accel.group(context_settings=_CONTEXT, invoke_without_command=True)
@_config_file_option
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
        raise _fail(ConfigError(str(error))) from None
    click.echo(f"accel: config written to {path}")


def _with_group_config_file(ctx: click.Context, own: str | None) -> str | None:
    """Return the subcommand's --config_file, else the one given to `accel config` before it."""
    group = ctx.parent.params.get("config_file") if ctx.parent is not None else None
    if own is not None and group is not None and own != group:
        raise click.UsageError(f"--config_file given twice: {group} (to accel config) and {own}")
    return own if own is not None else group


@config.command("default", context_settings=_CONTEXT)
@_config_file_option
@click.option(
    *_flag("mixed_precision"),
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


@config.command("show", context_settings=_CONTEXT)
@_config_file_option
@config_key_options
@click.pass_context
def config_show(ctx: click.Context, config_file: str | None, **flags: Any) -> None:
    """Print the effective config and where each value came from (default, file, env, flag)."""
    from accel_launch.commands.env_report import config_lines

    config_file = _with_group_config_file(ctx, config_file)
    effective, found = load_effective_config(config_file, _given_flags(ctx, flags))
    state = "" if found else " (not found; defaults shown)"
    click.echo(f"config file: {effective.path}{state}")
    for line in config_lines(effective):
        click.echo(line)


@accel.command("test", context_settings=_CONTEXT)
@_config_file_option
@click.pass_context
def test_command(ctx: click.Context, config_file: str | None) -> None:
    """Run the diagnostic checks (the umbrella's, registered as a test script) on the configured setup;
    exit 0 if all pass."""
    module = _test_script()
    if module is None or importlib.util.find_spec(module.partition(".")[0]) is None:
        raise ConfigProblem(
            "accel test runs the checks of the `accel` package, which is not installed; from the repository "
            "root: pip install -c constraints.txt ./packages/accel-state ./packages/accel-data "
            "./packages/accel-amp ./packages/accel-launch ./packages/accel"
        )
    defaults = {"max_restarts": 0, "monitor_interval": 0.1, "module": True, "env_pairs": (), "log_dir": None}
    options = _launch_options(ctx, {"config_file": config_file, "tee": None, **defaults})
    click.echo(f"accel test: running {module} on {options.num_processes} process(es)", err=True)
    sys.exit(_run(options, module, []))


def _test_script() -> str | None:
    """Return the module registered for `accel test` (entry-point group TEST_SCRIPT_GROUP), if any."""
    from accel_state.seam.entry_points import entry_points

    found = entry_points(TEST_SCRIPT_GROUP)
    return found[0].module if found else None


@accel.command("env", context_settings=_CONTEXT)
@_config_file_option
def env_command(config_file: str | None) -> None:
    """Print versions, platform, devices and the effective config, for a bug report."""
    from accel_launch.commands.env_report import environment_lines

    effective, found = load_effective_config(config_file, {})
    for line in environment_lines(effective, config_found=found):
        click.echo(line)


@accel.command("plot", context_settings=_CONTEXT)
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...")
@click.option("-o", "--output", required=True, help="Image file to write (.png, .svg, .pdf, ...).")
@click.option(
    "-m", "--metric", "metrics", multiple=True, help="Draw only this metric (repeatable); default: all."
)
def plot_command(run_dirs: tuple[str, ...], output: str, metrics: tuple[str, ...]) -> None:
    """Draw the metrics of one or more runs side by side: a panel per metric, a line per run.

    RUN_DIR is a run's folder or a folder above runs (a project dir): every folder under it that
    holds the JSON-lines tracker's metrics.jsonl or TensorBoard event files is a run. Needs
    matplotlib (accel-launch's plot extra; without it the error gives the install command);
    TensorBoard logs need tensorboard.
    """
    from pathlib import Path

    from accel_launch.runs.logs import RunLogError, load_runs
    from accel_launch.runs.plot import PlotError, check_matplotlib, check_output, plot_runs

    target = Path(output)
    try:
        check_output(target)
        check_matplotlib()
        runs = load_runs(list(run_dirs))
        drawn = plot_runs(runs, target, list(metrics) or None)
    except (PlotError, RunLogError) as error:
        raise ConfigProblem(str(error)) from None
    click.echo(f"accel plot: {len(drawn)} metric(s) of {len(runs)} run(s) written to {target}")


def main() -> None:
    """Entry point of the `accel` console script."""
    accel(prog_name="accel")


def launch_main() -> None:
    """Entry point of the `accel-launch` console script: the launch command on its own."""
    launch(prog_name="accel-launch")


if __name__ == "__main__":
    main()
