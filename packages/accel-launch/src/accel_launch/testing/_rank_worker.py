"""The script `testing.run_on_ranks` launches on every rank: call one function, pickle what it returned.

Usage (by run_on_ranks only): `python _rank_worker.py <call.pkl> <result dir>`. The call file holds
the function's source file, module name, qualname and pickled args; the result of rank R goes to
`<result dir>/rank_R.pkl` as ("ok", value) or ("error", formatted traceback).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any


def load_function(file: str, module_name: str, qualname: str) -> Any:
    """Return the object at `qualname` in the module at `file`, known to the caller as `module_name`.

    The module is imported by name when that finds the same file (library code), and loaded from
    its path otherwise (test modules, which pytest imports by path). Either way it is registered
    under the caller's name, so pickle finds its classes on both sides.
    """
    module = _import_by_name(file, module_name) or _load_by_path(file, module_name)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _import_by_name(file: str, module_name: str) -> ModuleType | None:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    module_file = getattr(module, "__file__", None)
    if module_file is None or Path(module_file).resolve() != Path(file):
        return None
    return module


def _load_by_path(file: str, module_name: str) -> ModuleType:
    # Like pytest's default import mode: the test's folder is importable, for its sibling helpers.
    sys.path.insert(0, str(Path(file).parent))
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a module from {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    _insert_parent_modules(module_name, module)
    spec.loader.exec_module(module)
    return module


def _insert_parent_modules(module_name: str, module: ModuleType) -> None:
    """Give a dotted module name empty parent modules where none exist, as pytest does.

    pickle imports a class's module by its full name, which needs every parent in sys.modules
    (pytest's importlib mode names test modules like `packages.accel-launch.tests.test_x`).
    """
    parts = module_name.split(".")
    child = module
    for depth in range(len(parts) - 1, 0, -1):
        parent_name = ".".join(parts[:depth])
        parent = sys.modules.get(parent_name)
        if parent is None:
            parent = ModuleType(parent_name)
            parent.__path__ = []  # a package, so that its children may be looked up
            sys.modules[parent_name] = parent
        if not hasattr(parent, parts[depth]):
            setattr(parent, parts[depth], child)
        child = parent


def _destroy_process_group() -> None:
    # A gloo group left alive aborts the process at exit, which would turn a success into a failure.
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main(call_file: str, result_dir: str) -> int:
    """Run the call described in `call_file` and write this rank's outcome; return the exit code."""
    rank = int(os.environ.get("RANK", "0"))
    # Python put this package's folder first on sys.path; its module names (cli, runner, ...) must
    # not shadow the caller's.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    result_path = Path(result_dir) / f"rank_{rank}.pkl"
    try:
        with open(call_file, "rb") as handle:
            call = pickle.load(handle)
        fn = load_function(call["file"], call["module"], call["qualname"])
        args = pickle.loads(call["args"])
        value = fn(*args)
        _destroy_process_group()
        outcome: tuple[str, Any] = ("ok", value)
        payload = pickle.dumps(outcome)
    except BaseException:
        text = traceback.format_exc()
        sys.stderr.write(f"rank {rank} raised:\n{text}")
        sys.stderr.flush()
        _write_atomically(result_path, pickle.dumps(("error", text)))
        try:
            _destroy_process_group()
        except Exception:  # noqa: BLE001 - the rank's own error is the one to report
            pass
        return 1
    _write_atomically(result_path, payload)
    return 0


def _write_atomically(path: Path, data: bytes) -> None:
    # A rank killed halfway through a write must not leave a truncated pickle behind.
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
