"""A random sampler whose order is a function of (seed, epoch) alone.

Every rank builds the same permutation without talking to the others, and the order does not
depend on how many processes share it: the property that makes 1-process and N-process runs
train on the same global sequence of batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
from torch.utils.data import Sampler


class SeedableRandomSampler(Sampler[int]):
    """Shuffles indices with a generator seeded by `seed + epoch`; `set_epoch` picks the epoch."""

    def __init__(
        self,
        data_source: Sized,
        seed: int = 0,
        replacement: bool = False,
        num_samples: int | None = None,
    ) -> None:
        self.data_source = data_source
        self.seed = int(seed)
        self.replacement = replacement
        self._num_samples = num_samples
        self.epoch = 0
        if self.num_samples <= 0 and len(data_source) > 0:
            raise ValueError(f"num_samples must be a positive integer, got {self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose permutation the next iteration yields."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        size = len(self.data_source)
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        if self.replacement:
            yield from torch.randint(size, (self.num_samples,), generator=generator).tolist()
            return
        remaining = self.num_samples
        while remaining > 0:
            chunk = torch.randperm(size, generator=generator).tolist()[:remaining]
            yield from chunk
            remaining -= len(chunk)

    def __len__(self) -> int:
        return self.num_samples
