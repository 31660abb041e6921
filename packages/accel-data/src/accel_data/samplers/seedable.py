"""A random sampler whose order is a function of (seed, epoch) alone, as Accelerate's.

Every rank builds the same permutation without talking to the others, and the order does not
depend on how many processes share it: the property that makes 1-process and N-process runs
train on the same global sequence of batches.

It behaves as Accelerate's `SeedableRandomSampler`: each pass seeds the sampler's generator
(created on first use when none was given) with `initial_seed + epoch`, draws what torch's
`RandomSampler` draws from it, and a pass run to its end advances the epoch. A plain `DataLoader`
over it therefore shuffles anew every epoch, and gives the same order as a prepared loader
(which sets the epoch before each pass).
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
from torch.utils.data import RandomSampler


def _default_device_generator() -> torch.Generator:
    """Return a new generator on torch's default device (where `randperm` draws by default)."""
    get_default_device = getattr(torch, "get_default_device", None)
    return torch.Generator(device=get_default_device() if get_default_device is not None else "cpu")


class SeedableRandomSampler(RandomSampler):
    """Shuffles indices with its generator seeded by `initial_seed + epoch`.

    The seed is `data_seed` (or its alias `seed`); without it, torch's initial seed when the
    sampler is built, as Accelerate's (the generator's own seed is not used: each pass reseeds it).
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
        self.initial_seed = int(chosen) if chosen is not None else torch.random.initial_seed()
        self.epoch = 0
        if self.num_samples <= 0 and len(data_source) > 0:
            raise ValueError(f"num_samples must be a positive integer, got {self.num_samples}")

    @property
    def seed(self) -> int:
        """The seed of epoch 0 (Accelerate's `initial_seed`)."""
        return self.initial_seed

    @property
    def num_samples(self) -> int:
        """Samples drawn per epoch: `num_samples` if given, else the dataset's length."""
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose permutation the next pass yields."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:
            self.generator = _default_device_generator()
        self.generator.manual_seed(self.initial_seed + self.epoch)
        if len(self.data_source) > 0:  # RandomSampler divides by the dataset's length
            yield from super().__iter__()
        self.set_epoch(self.epoch + 1)

    def pass_indices(self) -> list[int] | None:
        """Seed and draw the next pass as `iter` would, and return all its indices at once (what a
        sharded loader slices its batches from, calling `pass_ended` once it has yielded the last
        of them); None, drawing nothing, where the pass draws as it goes (replacement, or a
        `num_samples` other than the dataset's length)."""
        if self.replacement or self.num_samples != len(self.data_source):
            return None
        if self.generator is None:
            self.generator = _default_device_generator()
        self.generator.manual_seed(self.initial_seed + self.epoch)
        size = len(self.data_source)
        return torch.randperm(size, generator=self.generator).tolist() if size else []

    def pass_ended(self) -> None:
        """End a pass handed over by `pass_indices` as `iter` ends one: RandomSampler's last draw
        (the permutation it cuts to no index) leaves the generator where `iter` leaves it, and
        the epoch advances."""
        size = len(self.data_source)
        if size:
            assert self.generator is not None  # seeded by pass_indices
            torch.randperm(size, generator=self.generator)
        self.set_epoch(self.epoch + 1)

    def __len__(self) -> int:
        return self.num_samples
