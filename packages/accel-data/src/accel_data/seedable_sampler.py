"""A random sampler whose order is a function of (seed, epoch) alone.

Every rank builds the same permutation without talking to the others, and the order does not
depend on how many processes share it: the property that makes 1-process and N-process runs
train on the same global sequence of batches.

It takes Accelerate's constructor (a `RandomSampler`'s arguments plus `data_seed`), so code that
builds one itself runs unchanged. Unlike Accelerate's, iterating does not advance the epoch:
the loader (or the user) calls `set_epoch`, so iterating twice repeats the order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
from torch.utils.data import RandomSampler


class SeedableRandomSampler(RandomSampler):
    """Shuffles indices with a generator seeded by `seed + epoch`; `set_epoch` picks the epoch.

    The seed is `data_seed`; without it, the initial seed of `generator`, else torch's initial
    seed when the sampler is built (as Accelerate's). `seed` is the same as `data_seed`.
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        data_seed: int | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        # Not RandomSampler.__init__: it refuses an empty dataset, which a loader may legitimately hold.
        if seed is not None and data_seed is not None and int(seed) != int(data_seed):
            raise ValueError(f"seed={seed} and data_seed={data_seed} disagree; pass one of them")
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement must be a bool, got {replacement!r}")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        chosen = data_seed if data_seed is not None else seed
        if chosen is None:
            chosen = generator.initial_seed() if generator is not None else torch.initial_seed()
        self.seed = int(chosen)
        self.epoch = 0
        if self.num_samples <= 0 and len(data_source) > 0:
            raise ValueError(f"num_samples must be a positive integer, got {self.num_samples}")

    @property
    def initial_seed(self) -> int:
        """Accelerate's name for the seed."""
        return self.seed

    @property
    def num_samples(self) -> int:
        """Samples drawn per epoch: `num_samples` if given, else the dataset's length."""
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
