"""`SynchronizedRandomSampler`: torch's shuffle, the same on every rank, and replayable on resume.

What a prepared loader shuffles with when `use_seedable_sampler=False` (the default, as in
Accelerate). Each pass draws exactly what torch's `RandomSampler` draws, at the moment it draws
it, so on one process a prepared loader yields the plain loader's batches and leaves the random
generators as the plain loader leaves them. On N processes:

- without a generator of its own, every rank draws the pass's seed from its global generator (as
  torch does) and all use the main process's draw: the global order is the one process order,
  whatever the ranks' seeds;
- with a generator, the prepared loader copies the main process's generator state to every rank
  at the start of each pass (`rng_types=["generator"]`, as Accelerate does).

Each pass records what it drew from (`pass_record(epoch)`), and the loader saves that record with a
position inside an epoch: a resumed run shuffles the interrupted epoch exactly as it was shuffled,
although the random states it restored were taken after that shuffle.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import RandomSampler

from accel_state import PartialState, broadcast_object_list
from accel_state.process_group.timeouts import named_collective


class SynchronizedRandomSampler(RandomSampler):
    """Yields what `sampler` (a RandomSampler) would yield; see the module docstring."""

    def __init__(self, sampler: RandomSampler, synchronize: bool = False) -> None:
        # Not RandomSampler.__init__: it refuses an empty dataset, which a loader may legitimately hold.
        self.data_source = sampler.data_source
        self.replacement = sampler.replacement
        # RandomSampler's own private count (None: the dataset's length at each pass), which its
        # __iter__ and num_samples read; there is no public way to copy it.
        self._num_samples = sampler._num_samples
        self.generator = sampler.generator
        self.synchronize = synchronize  # share the main process's draw (all ranks iterate the loader)
        self.epoch = 0
        self._recorded: tuple[int, dict[str, Any]] | None = None  # (epoch, what its pass drew from)
        self._replay: tuple[int, dict[str, Any]] | None = None  # (epoch, record) for the next pass

    def set_epoch(self, epoch: int) -> None:
        """Note the epoch of the next pass (the order does not depend on it; a replay does)."""
        self.epoch = int(epoch)

    def pass_record(self, epoch: int) -> dict[str, Any] | None:
        """Return what the pass of `epoch` drew its order from (JSON data), None if unknown."""
        for known in (self._replay, self._recorded):
            if known is not None and known[0] == int(epoch):
                return known[1]
        return None

    def replay(self, epoch: int, record: dict[str, Any]) -> None:
        """Make the next pass, if it is of `epoch`, shuffle as the pass that recorded `record`."""
        if not isinstance(record, dict) or not ({"seed"} <= record.keys() or {"state"} <= record.keys()):
            raise ValueError(
                f"loader state_dict: 'shuffle' must hold a seed or a generator state, got {record!r}"
            )
        self._replay = (int(epoch), record)

    def __iter__(self) -> Iterator[int]:
        # Not a generator function: the pass's draw happens when iteration starts (a BatchSampler
        # asks for its sampler's iterator just before its first index, as torch's own loop draws),
        # and the indices come from a list iterator, with no Python frame per index.
        drawn = self._draw_pass()
        return iter(drawn) if isinstance(drawn, list) else drawn

    def pass_indices(self) -> list[int] | None:
        """Draw the next pass as `iter` would and return all its indices at once (what a sharded
        loader slices its batches from); None, drawing nothing, where the pass draws as it goes
        (a generator of the user's, which other code may draw from meanwhile, or replacement)."""
        if not self._one_permutation():
            return None
        drawn = self._draw_pass()
        assert isinstance(drawn, list)
        return drawn

    def _one_permutation(self) -> bool:
        """Whether a pass is one permutation of a private generator, drawn at its start."""
        return self.generator is None and not self.replacement and self.num_samples == len(self.data_source)

    def _draw_pass(self) -> list[int] | Iterator[int]:
        replay, self._replay = self._replay, None
        record = replay[1] if replay is not None and replay[0] == self.epoch else None
        private = self.generator is None
        if private:
            seed = int(record["seed"]) if record is not None else self._drawn_seed()
            self._recorded = (self.epoch, {"seed": seed})
            generator = torch.Generator()
            generator.manual_seed(seed)
        else:
            if record is not None:
                self.generator.set_state(_decoded_state(str(record["state"])))
            self._recorded = (self.epoch, {"state": _encoded_state(self.generator.get_state())})
            generator = self.generator
        size = len(self.data_source)
        if size == 0:  # RandomSampler divides by the dataset's length
            return []
        if self._one_permutation():
            # RandomSampler's one permutation; the draws it makes after it, of a generator nobody
            # else holds, cannot be seen.
            return torch.randperm(size, generator=generator).tolist()
        # torch's own loop, over the generator chosen here (a user's generator draws as it would).
        view = RandomSampler.__new__(RandomSampler)
        view.__dict__.update(data_source=self.data_source, replacement=self.replacement, generator=generator)
        view._num_samples = self._num_samples  # what RandomSampler.__iter__ reads (see __init__)
        return RandomSampler.__iter__(view)

    def _drawn_seed(self) -> int:
        """Return this pass's seed, drawn as torch's RandomSampler draws it (the main process's draw)."""
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        state = PartialState()
        if self.synchronize and state.use_distributed:
            with named_collective(
                "a shuffled data loader's first batch (sharing the main process's shuffle seed)"
            ):
                seed = int(broadcast_object_list([seed])[0])
        return seed

    def __len__(self) -> int:
        return self.num_samples


def _encoded_state(state: torch.Tensor) -> str:
    return base64.b64encode(state.numpy().tobytes()).decode("ascii")


def _decoded_state(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)
