"""Resume mid-epoch: `skip_first_batches(loader, n)` starts a pass at batch n of the epoch.

Map-style loaders skip by index (`SkipBatchSampler`): no sample of a skipped batch is loaded.
Loaders over iterable datasets, and DataLoader subclasses this module does not know, have no
index to jump to: they are fast-forwarded, which loads the skipped batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from accel_data.loaders.arguments import kept_arguments
from accel_data.loaders.shard import DataLoaderShard
from accel_data.samplers.skip_batch_sampler import SkipBatchSampler, consume


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """Return a loader whose next pass yields `dataloader`'s batches from batch `num_batches` on.

    For a prepared loader (`DataLoaderShard`) the new loader shares the original's sampler and
    position: its first pass is the rest of the current epoch (same shuffle, `end_of_dataloader`
    and `remainder` as the original's), it advances the original's epoch when it ends, later
    passes are whole epochs, and it cancels a resume armed by `load_state_dict`. A plain
    `DataLoader` has no epochs: the returned loader skips on every pass, as Accelerate's does.
    """
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
        raise ValueError(f"skip_first_batches: num_batches must be an integer >= 0, got {num_batches!r}")
    if isinstance(dataloader, DataLoaderShard):
        return dataloader._skipping(num_batches)
    if (
        type(dataloader) is DataLoader
        and not isinstance(dataloader.dataset, IterableDataset)
        and dataloader.batch_sampler is not None
    ):
        return DataLoader(
            dataloader.dataset,
            batch_sampler=SkipBatchSampler(dataloader.batch_sampler, num_batches),
            **kept_arguments(dataloader),
        )
    return _FastForwardedLoader(dataloader, num_batches)


class _FastForwardedLoader(DataLoader):
    """Iterates `dataloader` itself and drops its first `skip_batches` batches (they are loaded).

    For loaders without an index to skip by: iterable datasets, and DataLoader subclasses whose
    own iteration must be kept (their state, collectives, or dispatching). Other attributes are
    the wrapped loader's.
    """

    def __init__(self, dataloader: DataLoader, skip_batches: int) -> None:
        # DataLoader.__init__ is not called: this object only steers `dataloader`'s iteration.
        self._dataloader = dataloader
        self.skip_batches = skip_batches

    def __getattr__(self, name: str) -> Any:
        if name == "_dataloader":
            raise AttributeError(name)
        return getattr(self._dataloader, name)

    def __len__(self) -> int:
        return max(len(self._dataloader) - self.skip_batches, 0)

    # DataLoader.__iter__ is typed as torch's own iterator class; callers need only an iterator.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        batches = iter(self._dataloader)
        consume(batches, self.skip_batches)
        yield from batches
