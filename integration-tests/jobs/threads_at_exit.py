"""A small training job that lists its threads from an exit handler running after accel's teardown.

`python threads_at_exit.py global|local`: the prepared objects stay in module globals (as most
scripts keep them) or are dropped when training returns. Prints one line per rank:
THREADS {"rank": ..., "names": [...], "group_holders": [...]}, the holders (what still refers to a
process group, where a gloo thread survived) naming what the teardown missed. Launched by
test_exit_teardown_launch.py and the DeepSpeed session's exit test.
"""

import atexit
import gc
import json
import os
import sys
import warnings

import torch

from accel import Accelerator


def group_holders() -> list[str]:
    """Return what still holds a ProcessGroup: an object's attribute ("Type.name") or a container
    (its type, and what holds it). A group is not tracked by gc itself; what holds it is."""
    group_type = torch.distributed.ProcessGroup
    holders = []
    everything = gc.get_objects()
    for obj in everything:
        if isinstance(obj, dict):
            contents = [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            contents = list(obj)
        else:
            try:  # an instance's attributes (since Python 3.11 not a dict gc lists until asked for)
                attributes = object.__getattribute__(obj, "__dict__")
            except AttributeError:
                continue
            if isinstance(attributes, dict):
                names = [key for key, value in attributes.items() if isinstance(value, group_type)]
                holders += [f"{type(obj).__qualname__}.{name}" for name in names]
            continue
        if any(isinstance(item, group_type) for item in contents):
            holders.append(f"{type(obj).__name__} in {_owner(obj, everything)}")
    return sorted(set(holders))


def _owner(container: object, everything: list[object]) -> str:
    """Return what refers to `container` ("module.name", "dict.key" or a type's name), other than
    the list of `everything` gc tracks."""
    for referrer in gc.get_referrers(container):
        if referrer is everything:
            continue
        if isinstance(referrer, dict):
            key = next((k for k, v in referrer.items() if v is container), None)
            if key is not None:
                return f"{referrer.get('__name__', 'dict')}.{key}"
        return type(referrer).__qualname__
    return "nothing gc tracks"


def report_threads() -> None:
    names = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as comm:
            names.append(comm.read().strip())
    holders = []
    if any("gloo" in name for name in names):
        with warnings.catch_warnings():  # isinstance on a deprecated torch name warns
            warnings.simplefilter("ignore")
            holders = group_holders()
    report = {"rank": os.environ["RANK"], "names": sorted(names), "group_holders": holders}
    line = "THREADS " + json.dumps(report) + "\n"
    # One write, so that the ranks' lines never interleave on the shared pipe.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), line.encode())


# Registered before the Accelerator joins the process group, so it runs after accel's teardown
# (exit handlers run last-in first-out).
atexit.register(report_threads)


def train() -> tuple:
    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(2):
        optimizer.zero_grad()
        accelerator.backward(model(torch.randn(3, 4)).sum())
        optimizer.step()
    return accelerator, model, optimizer


if sys.argv[1] == "global":
    accelerator, model, optimizer = train()
else:
    train()
