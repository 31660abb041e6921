"""`IterableDataLoaderShard`: the prepared loader over an `IterableDatasetShard`, which knows how
many items of its last window are real (`remainder`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from accel_data.loaders.shard import DataLoaderShard


class IterableDataLoaderShard(DataLoaderShard):
    """A `DataLoaderShard` over an `IterableDatasetShard`; `remainder` is its last window's."""

    # DataLoader.__iter__ is typed as torch's own iterator class; callers need only an iterator.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        self.remainder = -1
        for batch in super().__iter__():
            if self.end_of_dataloader:
                # The look-ahead has exhausted the shard, so its last window is known by now.
                self.remainder = getattr(self.dataset, "remainder", -1)
            yield batch
