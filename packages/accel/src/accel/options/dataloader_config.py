"""`DataLoaderConfiguration`: how `prepare` shards data loaders (Accelerate's names)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DataLoaderConfiguration:
    """Options for the loaders an Accelerator prepares."""

    split_batches: bool = False
    even_batches: bool = True
    use_seedable_sampler: bool = False
    non_blocking: bool = False
    data_seed: int | None = None
    # None: the main process reads and dispatches batches of iterable datasets, map-style ones are
    # sharded by index on every rank.
    dispatch_batches: bool | None = None
    # Build prepared loaders on torchdata's StatefulDataLoader: its state is saved by save_state and
    # restored by load_state, which then resumes the loader mid-epoch by itself.
    use_stateful_dataloader: bool = False

    def __post_init__(self) -> None:
        if self.use_stateful_dataloader:
            from accel_data.loaders.stateful import stateful_dataloader_class

            stateful_dataloader_class()  # ImportError in one line, here rather than at prepare
