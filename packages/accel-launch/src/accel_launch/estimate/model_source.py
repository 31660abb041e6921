"""Build the model `accel estimate-memory` counts, on the meta device, from local files only.

MODEL is either a transformers config (a folder holding config.json, or the JSON file itself) or a
Python factory `package.module:function` / `path/to/file.py:function` called with no arguments.
Every tensor is created on the meta device (`with torch.device("meta")`), so a model of any size
is built in milliseconds and no weight memory. Nothing is downloaded: the hub is never asked.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accel_launch.estimate.errors import EstimateError

FACTORY = re.compile(r"^(?P<source>[^:]+):(?P<function>[A-Za-z_][A-Za-z0-9_.]*)$")


def build_meta_model(spec: str, trust_remote_code: bool = False) -> nn.Module:
    """Return the model `spec` names with every parameter and buffer on the meta device."""
    factory = FACTORY.match(spec)
    if factory and not Path(spec).exists():
        function = load_factory(factory["source"], factory["function"])
        return call_on_meta(function, spec)
    path = Path(spec)
    if path.is_dir() or path.suffix == ".json":
        return build_from_config(path, trust_remote_code)
    raise EstimateError(
        f"{spec}: not a config folder, a config .json file or a factory module:function "
        "(estimate-memory reads local files only; nothing is downloaded)"
    )


def load_factory(source: str, function: str) -> Callable[[], Any]:
    """Return `function` of the module `source` (a dotted module name or a .py file)."""
    if source.endswith(".py"):
        module = import_file(Path(source))
    else:
        # As `python -m` does: modules beside the caller import.
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(source)
        except ImportError as error:
            raise EstimateError(f"{source}: the module does not import ({error})") from None
        except Exception as error:
            raise EstimateError(f"{source}: importing it raised {type(error).__name__}: {error}") from None
    target: Any = module
    for part in function.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise EstimateError(f"{source}:{function}: {source} has no {function!r}")
    if not callable(target):
        raise EstimateError(f"{source}:{function}: is a {type(target).__name__}, not a function")
    return target


def import_file(path: Path) -> Any:
    """Import the Python file `path` as a module of its own name."""
    if not path.is_file():
        raise EstimateError(f"{path}: no such Python file")
    spec = importlib.util.spec_from_file_location(f"accel_estimate_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise EstimateError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise EstimateError(f"{path}: importing it raised {type(error).__name__}: {error}") from None
    return module


def call_on_meta(function: Callable[[], Any], spec: str) -> nn.Module:
    """Call the factory under the meta device and check that it returned a module."""
    try:
        with torch.device("meta"):
            model = function()
    except Exception as error:
        raise EstimateError(f"{spec}: calling it raised {type(error).__name__}: {error}") from None
    if not isinstance(model, nn.Module):
        raise EstimateError(f"{spec}: returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def build_from_config(path: Path, trust_remote_code: bool) -> nn.Module:
    """Build the transformers model a local config.json describes: its architecture when transformers
    has that class (so a causal LM keeps its head), else the base model (`AutoModel`)."""
    config_file = path / "config.json" if path.is_dir() else path
    if not config_file.is_file():
        raise EstimateError(f"{config_file}: no such config file")
    try:
        # Optional, and not a dependency of accel-launch: imported by name so type checks need it not.
        transformers = importlib.import_module("transformers")
    except ImportError:
        raise EstimateError(
            f"{path}: reading a transformers config needs the transformers package "
            "(pip install transformers), or give a factory module:function"
        ) from None
    try:
        config = transformers.AutoConfig.from_pretrained(
            str(config_file), local_files_only=True, trust_remote_code=trust_remote_code
        )
    except Exception as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise EstimateError(f"{config_file}: not a transformers config ({message})") from None
    architectures = getattr(config, "architectures", None) or []
    model_class = getattr(transformers, architectures[0], None) if architectures else None
    try:
        with torch.device("meta"):
            if model_class is not None and hasattr(model_class, "_from_config"):
                model = model_class._from_config(config)
            else:
                model = transformers.AutoModel.from_config(config, trust_remote_code=trust_remote_code)
    except Exception as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise EstimateError(f"{config_file}: transformers cannot build a model from it ({message})") from None
    return model
