"""`DataLoaderShard`: a DataLoader that yields this process's batches, already on its device.

It looks one batch ahead so it can tell the step that reads the last batch that it is the last
(`end_of_dataloader`), and how many real samples the last global batch holds (`remainder`), which
`gather_for_metrics` needs to drop the padding added by `even_batches`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from accel_data.rng_sync import synchronize_rng_states
from accel_state import GradientState, send_to_device


class DataLoaderShard(DataLoader):
    """A DataLoader over this process's shard; `len()` counts this process's batches."""

    def __init__(
        self,
        dataset: Any,
        *,
        device: torch.device | None = None,
        non_blocking: bool = False,
        rng_types: Sequence[str] | None = None,
        synchronized_generator: torch.Generator | None = None,
        total_dataset_length: int | None = None,
        global_batch_size: int | None = None,
        pads_last_batch: bool = False,
        **dataloader_kwargs: Any,
    ) -> None:
        super().__init__(dataset, **dataloader_kwargs)
        self.device = device
        self.non_blocking = non_blocking
        self.rng_types = list(rng_types or [])
        self.synchronized_generator = synchronized_generator
        self.total_dataset_length = total_dataset_length
        self.global_batch_size = global_batch_size
        self.pads_last_batch = pads_last_batch
        self.epoch = 0
        self.end_of_dataloader = False
        self.remainder = self._compute_remainder()
        self._gradient_state = GradientState()

    def _compute_remainder(self) -> int:
        """Real samples in the last global batch when padding may follow them, else -1."""
        if not self.pads_last_batch or not self.total_dataset_length or not self.global_batch_size:
            return -1
        return self.total_dataset_length % self.global_batch_size or self.global_batch_size

    @property
    def total_batch_size(self) -> int | None:
        """Samples consumed per step across all processes."""
        return self.global_batch_size

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass use epoch `epoch`'s shuffle (and forward it to the sampler)."""
        self.epoch = int(epoch)
        self._forward_epoch()

    def _forward_epoch(self) -> None:
        for holder in (self.batch_sampler, getattr(self.batch_sampler, "batch_sampler", None)):
            sampler = getattr(holder, "sampler", None)
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(self.epoch)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(self.epoch)

    def _place(self, batch: Any) -> Any:
        if self.device is None:
            return batch
        return send_to_device(batch, self.device, non_blocking=self.non_blocking)

    def __iter__(self) -> Iterator[Any]:
        if self.rng_types:
            synchronize_rng_states(self.rng_types, self.synchronized_generator)
        self._forward_epoch()
        self.end_of_dataloader = False
        self._gradient_state._add_dataloader(self)
        try:
            batches = super().__iter__()
            try:
                current = next(batches)
            except StopIteration:
                self.end_of_dataloader = True
                return
            for upcoming in batches:
                yield self._place(current)
                current = upcoming
            self.end_of_dataloader = True
            yield self._place(current)
        finally:
            self._gradient_state._remove_dataloader(self)
            self.epoch += 1
