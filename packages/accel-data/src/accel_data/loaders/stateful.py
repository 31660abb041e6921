"""Prepared loaders built on torchdata's `StatefulDataLoader` (`use_stateful_dataloader=True`).

The loader is a `DataLoaderShard` whose base is torchdata's `StatefulDataLoader` instead of torch's
`DataLoader`, so `isinstance(loader, StatefulDataLoader)` holds and torchdata's iterator state
(sampler progress, a `Stateful` dataset's own state, worker states) travels in `state_dict()` next to
accel's position. A `DataLoaderShard` looks one batch ahead, so torchdata's live state is always
one batch further than what the loop has seen: the state is recorded after each batch is fetched
and the one matching the position is reported. It is stored as text (base64 of `torch.save`), so
the position stays JSON data in a checkpoint, and read back with `torch.load(weights_only=True)`.

torchdata is optional: it is imported only when such a loader is asked for.
"""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from accel_data.loaders.shard import DataLoaderShard

STATE_KEY = "stateful_dataloader"  # torchdata's iterator state, in the loader's state_dict
_MISSING = (
    "use_stateful_dataloader=True needs torchdata's StatefulDataLoader, which is not installed: "
    "pip install torchdata"
)


def stateful_dataloader_class() -> type:
    """Return torchdata's `StatefulDataLoader`; ImportError in one line when torchdata is missing."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        raise ImportError(_MISSING) from None
    return StatefulDataLoader


@functools.cache
def stateful_shard_class() -> type[DataLoaderShard]:
    """Return the `DataLoaderShard` class whose base loader is torchdata's `StatefulDataLoader`."""
    return type(
        "StatefulDataLoaderShard", (_StatefulShard, stateful_dataloader_class()), {"__module__": __name__}
    )


def _encode(snapshot: Mapping[str, Any]) -> str:
    buffer = io.BytesIO()
    torch.save(dict(snapshot), buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _decode(text: str) -> dict[str, Any]:
    return torch.load(io.BytesIO(base64.b64decode(text)), weights_only=True)


class _StatefulShard(DataLoaderShard):
    """What a `DataLoaderShard` adds over `StatefulDataLoader` (combined in `stateful_shard_class`)."""

    next_iter_state: Any  # StatefulDataLoader's: the state its next iterator starts from

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._snapshots: dict[tuple[int, int], dict[str, Any]] = {}  # (epoch, batches seen) -> state
        self._loaded: tuple[int, int, dict[str, Any]] | None = None  # (epoch, batches, state) to resume

    def _batches(self, skip: int) -> Iterator[Any]:
        loaded, self._loaded = self._loaded, None
        epoch = self._position.epoch
        if skip and loaded is not None and loaded[:2] == (epoch, skip):
            # torchdata resumes from the state loaded into it: its iterator skips, not accel's sampler.
            return self._recorded(super()._batches(0), epoch, skip)
        self.next_iter_state = None  # a loaded state that is not this pass's (set_epoch, skip_first_batches)
        if skip:
            return super()._batches(skip)  # a plain loader over the skipping sampler: no torchdata state
        return self._recorded(super()._batches(0), epoch, 0)

    def _recorded(self, iterator: Any, epoch: int, start: int) -> Iterator[Any]:
        """Yield `iterator`'s batches, recording torchdata's state after each of them."""
        self._snapshots = {}
        seen = start
        for batch in iterator:
            seen += 1
            # The loop is at most one batch behind: keep that batch's state and this one's.
            self._snapshots = {key: value for key, value in self._snapshots.items() if key[1] == seen - 1}
            self._snapshots[(epoch, seen)] = iterator.state_dict()
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """Return accel's position and, within an epoch, torchdata's state at that position."""
        state = super().state_dict()
        key = (int(state["epoch"]), int(state["batches_yielded"]))
        snapshot = self._snapshots.get(key)
        if snapshot is None and self._loaded is not None and self._loaded[:2] == key:
            snapshot = self._loaded[2]  # loaded, not iterated since
        if key[1] and snapshot is not None:
            state[STATE_KEY] = _encode(snapshot)
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a position from `state_dict()`; torchdata resumes the pass when its state is there."""
        encoded = state_dict.get(STATE_KEY)
        super().load_state_dict({key: value for key, value in state_dict.items() if key != STATE_KEY})
        self._loaded = None
        resume = self._position.resume
        # A position converted to another batch size no longer matches torchdata's state: accel skips.
        if encoded is None or resume is None or resume[1] != int(state_dict["batches_yielded"]):
            return
        snapshot = _decode(str(encoded))
        super(DataLoaderShard, self).load_state_dict(snapshot)  # type: ignore[misc]  # StatefulDataLoader's
        self._loaded = (resume[0], resume[1], snapshot)
