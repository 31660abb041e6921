"""The launch hook: what an engine tells `accel launch`, as data and small functions, so that the
command line loops over hooks instead of branching on engines.

A hook declares the flag that asks for its jobs (`Selector`), its config-file section and keys
(`ConfigKey`: the CLI makes a flag of each, the loader checks files against them, `accel config`
asks its `Question`s), the combinations it refuses (`check`, one line naming the flag or key), the
env vars its workers get (`worker_env`) and how its replicas start: through torch's elastic agent
(the launcher's torchrun arguments), or its own `start_replicas` when its runtime starts them.

Hooks are found through one registry: the `accel.launch_hooks` entry-point group (name: the hook's
name, object: a `LaunchHook`), read once per process. accel-state declares its in-tree backends'
and the stand-ins of the adapters shipped apart; each adapter declares its hook, which replaces
the stand-in of its name. This module, and every hook, imports no torch, click, yaml or engine:
the CLI reads all hooks for `accel --help`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from accel_state.seam.entry_points import entry_points

ENTRY_POINT_GROUP = "accel.launch_hooks"
# The distributed type a job runs as when none is set: the one-process case, which accel_state
# infers further from the process counts.
DEFAULT_DISTRIBUTED_TYPE = "NO"


class LaunchHookError(ValueError):
    """A job a hook refuses, or a hook that cannot be loaded; the message is one line naming the
    flag, env var or file key (or the entry point) at fault."""


class ConfigKey(NamedTuple):
    """One key of the config file: its type, allowed values and default, and whether it has a flag."""

    name: str
    kind: str  # "bool", "int", "float", "str", "choice", "dict", "list"
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()  # for "choice"; for "int", the allowed values written as strings
    minimum: int | None = None
    aliases: tuple[str, ...] = ()  # extra flag names, e.g. Accelerate's `--cpu` for `use_cpu`
    flag: bool = True  # False for a key that has no flag of its own
    env_var: str | None = None  # the ACCEL_* variable that may set it (and that the workers read)
    # A section key that is the fallback of the top-level key of its name (Accelerate writes
    # `<engine>_config.gradient_accumulation_steps`), not a setting of its own.
    top_level: bool = False
    # What the launcher's check of `env_var` says is wrong with a value (None: fine); by default
    # the check follows `kind`, `choices` and `minimum`.
    env_check: Callable[[str], str | None] | None = None

    @property
    def has_flag(self) -> bool:
        return self.flag and self.kind not in ("dict", "list") and not self.top_level


class Selector(NamedTuple):
    """The switch that asks for an engine's job (`--use_<engine>`): it sets distributed_type."""

    names: tuple[str, ...]  # flag names without dashes, the first one named in messages
    help: str
    dest: str = ""  # the parameter's name (default: the first name)

    @property
    def parameter(self) -> str:
        return self.dest or self.names[0]


def _always(section: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    return True


class Question(NamedTuple):
    """One question `accel config` asks for a hook's section; the answer is stored under `key`.

    With an empty `prompt` nothing is asked and `default` is written. `when(section, config)`
    (the section's answers so far, the top-level answers) says whether it applies at all.
    """

    key: str
    prompt: str
    default: Any = None
    choices: tuple[str, ...] = ()  # a choice among these; the answer takes the key's type
    confirm: bool = False  # a yes/no question
    optional: bool = False  # an empty answer stores nothing
    when: Callable[[Mapping[str, Any], Mapping[str, Any]], bool] = _always


class JobConfig(Protocol):
    """What a hook reads of the effective config: each setting, whether someone set it, and where."""

    @property
    def path(self) -> Path | None: ...

    def __getitem__(self, name: str) -> Any: ...

    def given(self, name: str) -> Any:
        """Return the value of `name` if a file, env var or flag set it, else None."""

    def where(self, name: str) -> str:
        """Return where `name` was set, to start a message ("--zero_stage", "FILE: key 'x'")."""


class JobOptions(Protocol):
    """What a hook reads of the checked options of a launch."""

    @property
    def num_processes(self) -> int: ...
    @property
    def num_machines(self) -> int: ...
    @property
    def max_restarts(self) -> int: ...
    @property
    def log_dir(self) -> str | None: ...
    @property
    def tee(self) -> str | None: ...
    @property
    def env(self) -> dict[str, str]: ...


class WorkerJob(NamedTuple):
    """What a hook is told when it writes its workers' env vars."""

    num_processes: int
    cpu: bool
    settings: Mapping[str, Any]  # the hook's section settings that were given, by name
    environ: Mapping[str, str]  # what the workers would see without the hook's variables


class ReplicaStarter(Protocol):
    """How a runtime that starts a job's replicas itself (not torch's agent) runs a function on each."""

    def __call__(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...] = (),
        *,
        num_processes: int = 1,
        start_method: str = "spawn",
    ) -> list[Any]:
        """Run `function(*args)` on `num_processes` replicas; return each replica's result."""


def _no_check(config: JobConfig) -> None:
    return None


def _no_options_check(options: JobOptions, environ: Mapping[str, str]) -> None:
    return None


class LaunchHook(NamedTuple):
    """An engine's part of a launch. Only `name`, `title` and `distributed_types` are required."""

    name: str  # its entry point's name
    title: str  # for messages: "a <title> option", "the <title> job failed"
    distributed_types: tuple[str, ...]  # the types it starts; a selector sets the first
    cpu_types: tuple[str, ...] = ()  # those of them that may run on the CPU (`use_cpu`)
    selector: Selector | None = None
    section: str | None = None  # its config-file section, e.g. "<engine>_config"
    keys: tuple[ConfigKey, ...] = ()  # the section's typed keys
    passed_keys: tuple[str, ...] = ()  # section keys known but not read (misspellings are refused)
    questions: tuple[Question, ...] = ()
    offered_by_config: bool = True  # whether `accel config` offers its types
    # Refuses impossible combinations of a resolved config (every config, whatever its type: the
    # hook looks at its own keys); runs for `accel config show` too.
    check: Callable[[JobConfig], None] = _no_check
    # Refuses a job of its types that could not start here (a library missing, a file unusable).
    check_launch: Callable[[JobConfig], None] = _no_check
    # Refuses options its way of starting replicas cannot honour; `environ` is the launcher's.
    check_options: Callable[[JobOptions, Mapping[str, str]], None] = _no_options_check
    # The env vars its workers get (default: each given setting's `env_var`, see `settings_env`).
    worker_env: Callable[[WorkerJob], dict[str, str]] | None = None
    # None: replicas start through torch's elastic agent, at the launcher's rendezvous.
    start_replicas: ReplicaStarter | None = None
    article: str = "a"  # "a <title> option" or "an <title> option"
    # A stand-in for an adapter that is not installed: it knows the selector and section so that
    # asking for the engine is refused by `check_launch` with the install line, not "no such option".
    stand_in: bool = False
    install_hint: str | None = None
    # Known to a stand-in, so that they are refused with the install line: the flags (without
    # dashes) and ACCEL_* variables its adapter adds. A test keeps them equal to the adapter's keys.
    adapter_flags: tuple[str, ...] = ()
    adapter_env_vars: tuple[str, ...] = ()
    # (import name, distribution) of what `accel env` reports the versions of.
    reported: tuple[tuple[str, str], ...] = ()

    @property
    def settings_keys(self) -> tuple[ConfigKey, ...]:
        """Return the section keys that are settings of their own (not a top-level key's fallback)."""
        return tuple(key for key in self.keys if not key.top_level)

    def settings(self, config: JobConfig) -> dict[str, Any]:
        """Return the section settings of `config` that someone set, by name."""
        given = {key.name: config.given(key.name) for key in self.settings_keys}
        return {name: value for name, value in given.items() if value is not None}

    def env_for(self, job: WorkerJob) -> dict[str, str]:
        """Return the env vars this hook's workers get for `job`."""
        if self.worker_env is not None:
            return self.worker_env(job)
        return settings_env(self.settings_keys, job.settings)


def env_value(value: Any) -> str:
    """Return `value` written as the ranks read it: true/false, a float's repr, else str()."""
    if isinstance(value, bool):
        return "true" if value else "false"  # accel_state.environment.env_vars.read_flag reads them
    if isinstance(value, float):
        return repr(value)
    return str(value)


def settings_env(keys: tuple[ConfigKey, ...], settings: Mapping[str, Any]) -> dict[str, str]:
    """Return `{key.env_var: value}` for each of `keys` with an env var that `settings` gives."""
    return {
        key.env_var: env_value(settings[key.name])
        for key in keys
        if key.env_var is not None and settings.get(key.name) is not None
    }


def _load(entry: Any) -> LaunchHook:
    try:
        target: Any = importlib.import_module(entry.module)
        if entry.attribute is not None:
            target = getattr(target, entry.attribute)
    except (ImportError, AttributeError) as error:
        raise LaunchHookError(
            f"launch hook {entry.name} ({entry.value}, of {entry.distribution}) cannot be loaded: {error}"
        ) from None
    if not isinstance(target, LaunchHook) or target.name != entry.name:
        raise LaunchHookError(
            f"launch hook {entry.name} ({entry.value}, of {entry.distribution}) is not a LaunchHook named "
            f"{entry.name!r}"
        )
    return target


_hooks: dict[str, LaunchHook] | None = None


def launch_hooks() -> dict[str, LaunchHook]:
    """Return every registered hook by name, read once per process: an adapter's hook replaces
    the stand-in of its name. The default hook (no selector) comes first, then the others by name."""
    global _hooks
    if _hooks is None:
        found: dict[str, LaunchHook] = {}
        for entry in entry_points(ENTRY_POINT_GROUP):
            hook = _load(entry)
            if entry.name not in found or found[entry.name].stand_in:
                found[entry.name] = hook
        order = sorted(found.values(), key=lambda hook: (hook.selector is not None, hook.name))
        _hooks = {hook.name: hook for hook in order}
    return _hooks


def hook_for_type(distributed_type: str | None) -> LaunchHook:
    """Return the hook that starts jobs of `distributed_type` (None: the default type's)."""
    wanted = distributed_type or DEFAULT_DISTRIBUTED_TYPE
    for hook in launch_hooks().values():
        if wanted in hook.distributed_types:
            return hook
    raise LaunchHookError(f"no launch hook is registered for distributed type {wanted}")


def launchable_types() -> tuple[str, ...]:
    """Return the distributed types some hook starts, in the hooks' order."""
    return tuple(kind for hook in launch_hooks().values() for kind in hook.distributed_types)
