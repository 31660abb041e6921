"""`DataLoaderShard`: a DataLoader that yields this process's batches, already on its device.

It looks one batch ahead so it can tell the step that reads the last batch that it is the last
(`end_of_dataloader`), and how many real samples the last global batch holds (`remainder`), which
`gather_for_metrics` needs to drop the padding added by `even_batches`.

It also knows where it stands: the epoch and how many of that epoch's batches it has yielded.
`state_dict()` reports that position and `load_state_dict()` restores it, arming a one-shot skip
so that the next pass continues the interrupted epoch (see `accel_data.samplers.skip_batch_sampler` for how
batches are skipped without loading them). The loaders that `skip_first_batches` makes from a
loader share its position, so a checkpoint of the original sees their progress and their end of
epoch.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from accel_data.samplers.rng_sync import synchronize_rng_states
from accel_data.samplers.skip_batch_sampler import SkipBatchSampler
from accel_data.samplers.synchronized import SynchronizedRandomSampler
from accel_state import GradientState, send_to_device

# DataLoader arguments that a rebuild over the loader's own batch sampler must not repeat.
_BATCHING_ARGUMENTS = ("batch_size", "shuffle", "sampler", "drop_last")
# The state_dict key of what the epoch in progress drew its shuffle from.
SHUFFLE_KEY = "shuffle"


class LoaderStateError(ValueError):
    """A loader state cannot be restored as given."""


class _Position:
    """Where a loader, and every loader made from it by `skip_first_batches`, stands."""

    __slots__ = ("epoch", "batches_yielded", "finishing", "resume")

    def __init__(self) -> None:
        self.epoch = 0
        self.batches_yielded = 0  # of the current epoch, counting skipped ones
        self.finishing = False  # the epoch's last batch has been yielded
        self.resume: tuple[int, int] | None = None  # (epoch, batches) armed by load_state_dict


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
        self.device = None if device is None else torch.device(device)
        self.non_blocking = non_blocking
        self.rng_types = list(rng_types or [])
        self.synchronized_generator = synchronized_generator
        self.total_dataset_length = total_dataset_length
        self.global_batch_size = global_batch_size
        self.pads_last_batch = pads_last_batch
        self.end_of_dataloader = False
        self.remainder = self._compute_remainder()
        self._gradient_state = GradientState()
        self._dataloader_kwargs = dataloader_kwargs
        self._position = _Position()
        self._skip_batches = 0  # set by skip_first_batches: skipped by the first pass only
        self._pass_skip: int | None = None  # batches skipped by the pass in progress

    def _compute_remainder(self) -> int:
        """Real samples in the last global batch when padding may follow them, else -1."""
        if not self.pads_last_batch or not self.total_dataset_length or not self.global_batch_size:
            return -1
        return self.total_dataset_length % self.global_batch_size or self.global_batch_size

    @property
    def index_batches(self) -> Any:
        """Return what yields this loader's lists of indices, or None when nothing does.

        That is its batch_sampler or, with batch_size=None, a BatchSampler given as its sampler:
        each list it yields is then fetched as one batch (`dataset[list]`).
        """
        if self.batch_sampler is not None:
            return self.batch_sampler
        return self.sampler if isinstance(self.sampler, BatchSampler) else None

    @property
    def total_batch_size(self) -> int | None:
        """Samples consumed per step across all processes."""
        return self.global_batch_size

    @property
    def epoch(self) -> int:
        """The epoch of the pass in progress, or of the next pass."""
        return self._position.epoch

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self._position.epoch = int(epoch)

    @property
    def skip_batches(self) -> int:
        """Batches the pass in progress skipped, or that the next pass will skip."""
        return self._pending_skip() if self._pass_skip is None else self._pass_skip

    def _pending_skip(self) -> int:
        if self._skip_batches:
            return self._skip_batches
        resume = self._position.resume
        return resume[1] if resume is not None and resume[0] == self._position.epoch else 0

    def __len__(self) -> int:
        """Batches of this process in the pass in progress or the next, skipped ones left out."""
        return max(super().__len__() - self.skip_batches, 0)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass use epoch `epoch`'s shuffle (and forward it to the sampler)."""
        position = self._position
        if int(epoch) != position.epoch:
            # A position inside another epoch no longer says where the next pass starts.
            position.batches_yielded, position.finishing, position.resume = 0, False, None
        position.epoch = int(epoch)
        self._forward_epoch()

    def _forward_epoch(self) -> None:
        batches = self.index_batches
        for holder in (batches, getattr(batches, "batch_sampler", None)):
            sampler: Any = getattr(holder, "sampler", None)
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(self.epoch)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(self.epoch)

    # Position ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Return where to resume: the epoch and how many of its batches were yielded (JSON-able).

        Once the epoch's last batch has been yielded, that is the next epoch at batch 0. A pass
        abandoned before its end (`break`) counts as a finished epoch, as it does for `epoch`.
        """
        position = self._position
        epoch, done = position.epoch, position.batches_yielded
        if position.finishing:
            epoch, done = epoch + 1, 0
        state: dict[str, Any] = {
            "epoch": epoch,
            "batches_yielded": done,
            "global_batch_size": self.global_batch_size,
        }
        sampler = self._synchronized_sampler()
        record = sampler.pass_record(epoch) if sampler is not None and done else None
        if record is not None:
            # The random states a checkpoint restores were taken after this epoch's shuffle.
            state[SHUFFLE_KEY] = record
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a position from `state_dict()`: the next pass of that epoch skips what was yielded.

        The skip is one-shot, applies only if the next pass is of the saved epoch, and is
        cancelled by `skip_first_batches(loader, n)`, whose explicit `n` wins: the two never both
        skip. A position saved with another global batch size is converted when the samples
        consumed fill whole batches of the new size.
        """
        for key in ("epoch", "batches_yielded"):
            if key not in state_dict:
                raise LoaderStateError(f"loader state_dict: missing key {key!r} (got {sorted(state_dict)})")
        try:
            epoch, done = int(state_dict["epoch"]), int(state_dict["batches_yielded"])
            saved_size = state_dict.get("global_batch_size")
            saved_size = None if saved_size is None else int(saved_size)
        except (TypeError, ValueError):
            raise LoaderStateError(
                "loader state_dict: epoch, batches_yielded and global_batch_size must be integers, got "
                f"{ {key: state_dict.get(key) for key in ('epoch', 'batches_yielded', 'global_batch_size')} }"
            ) from None
        if epoch < 0 or done < 0:
            raise LoaderStateError(
                f"loader state_dict: epoch and batches_yielded must be >= 0, got epoch={epoch}, "
                f"batches_yielded={done}"
            )
        done = self._batches_at_this_size(done, saved_size)
        position = self._position
        position.epoch, position.batches_yielded, position.finishing = epoch, done, False
        position.resume = (epoch, done) if done else None
        self.restore_shuffle(state_dict)

    def restore_shuffle(self, state_dict: Mapping[str, Any]) -> None:
        """Make the next pass of the saved epoch shuffle as the saved pass did, if `state_dict` says how.

        What `load_state` calls when the caller skips the batches seen itself (`skip_first_batches`):
        the random states it restored were taken after that epoch's shuffle was drawn.
        """
        sampler = self._synchronized_sampler()
        if sampler is not None and state_dict.get(SHUFFLE_KEY) is not None:
            sampler.replay(int(state_dict["epoch"]), state_dict[SHUFFLE_KEY])

    def _synchronized_sampler(self) -> SynchronizedRandomSampler | None:
        batches = self.index_batches
        for holder in (batches, getattr(batches, "batch_sampler", None)):
            sampler = getattr(holder, "sampler", None)
            if isinstance(sampler, SynchronizedRandomSampler):
                return sampler
        return None

    def _batches_at_this_size(self, done: int, saved_size: int | None) -> int:
        size = self.global_batch_size
        if not done or not saved_size or not size or saved_size == size:
            return done
        samples = done * saved_size
        if samples % size:
            raise LoaderStateError(
                f"loader state_dict: {done} batches of {saved_size} samples ({samples} samples) do not "
                f"fill whole batches of this loader's global batch size {size}; resume with a global "
                f"batch size dividing {samples}"
            )
        return samples // size

    # Iteration --------------------------------------------------------------------------------
    def _moves_batches(self) -> bool:
        """Whether this pass's batches go to the device. Asked once a pass, after its first batch was
        made: with no GPU in use every tensor a loader yields is on the CPU already (walking each
        batch to check costs about 1.5% of a small batch's time)."""
        return self.device is not None and (self.device.type != "cpu" or torch.cuda.is_initialized())

    def _place(self, batch: Any) -> Any:
        return send_to_device(batch, self.device, non_blocking=self.non_blocking)

    def _take_skip(self) -> int:
        """Return the batches this pass skips; an armed resume is spent (or cancelled) either way."""
        skip = self._pending_skip()
        self._position.resume = None
        return skip

    def _resumed_batches(self, skip: int) -> Iterator[Any]:
        """Return the pass's iterator; a resumed pass leaves the random generators as it found them.

        Starting a DataLoader iterator draws a seed from the loader's generator (torch's global one
        by default). An uninterrupted run drew it at the start of the epoch, before the state that
        a checkpoint restored was taken; drawing it again would shift every later random draw.
        """
        if not skip:
            return self._batches(0)
        generator = self.generator
        saved = generator.get_state() if generator is not None else torch.get_rng_state()
        batches = self._batches(skip)
        if generator is not None:
            generator.set_state(saved)
        else:
            torch.set_rng_state(saved)
        return batches

    def _batches(self, skip: int) -> Iterator[Any]:
        if not skip:
            return super().__iter__()
        batch_sampler = self.index_batches
        if isinstance(self.dataset, IterableDataset) or batch_sampler is None:
            # A stream, or a loader without batches, has no batch index to jump to: fast-forward,
            # which loads the skipped batches.
            batches = super().__iter__()
            next(itertools.islice(batches, skip, skip), None)
            return batches
        arguments = {**self._rebuild_arguments(), "persistent_workers": False}
        skipping = SkipBatchSampler(batch_sampler, skip)
        arguments["sampler" if self.batch_sampler is None else "batch_sampler"] = skipping
        return iter(DataLoader(self.dataset, **arguments))

    def _rebuild_arguments(self) -> dict[str, Any]:
        """DataLoader arguments that rebuild this loader over the same batch sampler object."""
        arguments = dict(self._dataloader_kwargs)
        if not isinstance(self.dataset, IterableDataset):
            for name in _BATCHING_ARGUMENTS:
                arguments.pop(name, None)
            if self.batch_sampler is None:  # batch_size=None: the sampler's items are whole batches
                arguments.update(sampler=self.sampler, batch_size=None)
            else:
                arguments["batch_sampler"] = self.batch_sampler
        return arguments

    def _skipping(self, num_batches: int) -> DataLoaderShard:
        """Return a loader sharing this one's sampler and position whose first pass skips `num_batches`."""
        view = type(self)(
            self.dataset,
            device=self.device,
            non_blocking=self.non_blocking,
            rng_types=self.rng_types,
            synchronized_generator=self.synchronized_generator,
            total_dataset_length=self.total_dataset_length,
            global_batch_size=self.global_batch_size,
            pads_last_batch=self.pads_last_batch,
            **self._rebuild_arguments(),
        )
        view._position = self._position
        view._skip_batches = num_batches
        self._position.resume = None
        return view

    # DataLoader.__iter__ is typed as torch's own iterator class; callers need only an iterator.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.rng_types:
            synchronize_rng_states(self.rng_types, self.synchronized_generator)
        self._forward_epoch()
        self.end_of_dataloader = False
        position = self._position
        self._pass_skip = skip = self._take_skip()
        position.batches_yielded, position.finishing = skip, False
        self._gradient_state.register_loader(self)
        try:
            batches = self._resumed_batches(skip)
            try:
                current = next(batches)
            except StopIteration:
                self.end_of_dataloader = True
                return
            moves = self._moves_batches()
            for upcoming in batches:
                position.batches_yielded += 1
                yield self._place(current) if moves else current
                current = upcoming
            self.end_of_dataloader = True
            position.batches_yielded += 1
            position.finishing = True
            yield self._place(current) if moves else current
        finally:
            self._gradient_state.unregister_loader(self)
            position.epoch += 1
            position.batches_yielded, position.finishing = 0, False
            self._pass_skip, self._skip_batches = None, 0
