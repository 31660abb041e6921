"""`DataLoaderDispatcher`: the main process reads the data and sends every rank its slice.

Only the main process iterates the underlying loader, built with the global batch size
(`batch_size * N`, or `batch_size` with `split_batches`). It cuts each global batch along its rows
into N equal slices, in rank order, and sends rank r slice r together with the flags its loader
needs: is this its last batch, and how many real samples the last global batch holds (`remainder`)
when `even_batches` padded it with rows of the first global batch. Other ranks never touch the
dataset, so any dataset works, however it iterates (workers, streaming, shuffling).

If reading fails on the main process, every other rank gets the error instead of a batch and
raises `DispatchError`, so no rank waits forever for a batch that will not come.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, IterableDataset

from accel_data.sharding.batch_rows import concat_rows, count_rows, take_rows
from accel_data.sharding.iterable import check_sharding
from accel_state import GradientState, PartialState, send_to_device
from accel_state.process_group.timeouts import names_collective


class DispatchError(RuntimeError):
    """The main process failed to produce the batches this rank was waiting for."""


@dataclass(frozen=True)
class Dispatch:
    """What one rank receives for one step of a dispatched loader."""

    batch: Any = None
    has_batch: bool = False  # False: nothing for this rank this step (even_batches=False only)
    last_batch: bool = False  # this is the rank's last batch of the pass
    final: bool = False  # no message follows in this pass
    remainder: int = -1  # real samples of the last global batch when it was padded, else -1
    error: str | None = None


_END = object()


def _whole_batches(batches: Iterable[Any], size: int, drop_last: bool) -> Iterator[Any]:
    """Yield the rows of `batches` regrouped into batches of `size` rows, the last possibly fewer.

    A loader only yields a short batch at its end, except with several workers each ending its
    own stream with one; regrouping puts every short batch's rows where they belong.
    """
    pending = None
    for batch in batches:
        if pending is not None:
            batch, pending = concat_rows(pending, batch), None
        rows = count_rows(batch)
        if rows == size:
            yield batch
            continue
        start = 0
        while rows - start >= size:
            yield take_rows(batch, slice(start, start + size))
            start += size
        if start < rows:
            pending = batch if start == 0 else take_rows(batch, slice(start, rows))
    if pending is not None and not drop_last:
        yield pending


def plan_dispatch(
    batches: Iterable[Any],
    num_processes: int,
    global_batch_size: int,
    *,
    even_batches: bool = True,
    drop_last: bool = False,
) -> Iterator[list[Dispatch]]:
    """Yield, step by step, the `Dispatch` of each rank (in rank order) for the global `batches`.

    The last step's messages are `final`; a pass over no data is one step of empty final messages.
    """
    n, size = num_processes, global_batch_size
    share = size // n
    chunks = _whole_batches(batches, size, drop_last)
    current = next(chunks, _END)
    if current is _END:
        yield [Dispatch(final=True)] * n
        return
    first = current
    rows = count_rows(current)
    while True:
        upcoming = next(chunks, _END)
        final = upcoming is _END
        upcoming_rows = 0 if final else count_rows(upcoming)
        remainder = -1
        if rows < size and even_batches and n > 1:
            first_rows = count_rows(first)
            filler = take_rows(first, [i % first_rows for i in range(size - rows)])
            current, remainder, rows = concat_rows(current, filler), rows, size
        step = []
        for rank in range(n):
            start = rank * share
            has_batch = start < rows
            piece = None
            if has_batch:
                piece = current if n == 1 else take_rows(current, slice(start, min(start + share, rows)))
            # Without even_batches, a rank may get nothing from the short last batch.
            more = not final and (even_batches or upcoming_rows > start)
            step.append(Dispatch(piece, has_batch, has_batch and not more, final, remainder))
        yield step
        if final:
            return
        current, rows = upcoming, upcoming_rows


def _failure(error: BaseException, step: int) -> Dispatch:
    reason = f"{type(error).__name__}: {error}"
    return Dispatch(final=True, error=f"the main process failed while preparing step {step}: {reason}")


class DataLoaderDispatcher(DataLoader):
    """A DataLoader whose batches the main process reads and slices for every rank.

    `batch_size` is per process (the global batch with `split_batches`), as given to the loader
    being prepared; `len()` counts this process's batches when the dataset's length is known.
    On one process it behaves like a plain loader.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        *,
        split_batches: bool = False,
        even_batches: bool = True,
        drop_last: bool = False,
        device: torch.device | None = None,
        non_blocking: bool = False,
        **dataloader_kwargs: Any,
    ) -> None:
        state = PartialState()
        num_processes, process_index = state.num_processes, state.process_index
        check_sharding(batch_size, num_processes, process_index, split_batches)
        global_batch_size = batch_size if split_batches else batch_size * num_processes
        super().__init__(dataset, batch_size=global_batch_size, drop_last=drop_last, **dataloader_kwargs)
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.per_process_batch_size = global_batch_size // num_processes
        self.device = device
        self.non_blocking = non_blocking
        self.epoch = 0
        self.end_of_dataloader = False
        self.remainder = -1
        self._gradient_state = GradientState()

    @property
    def total_batch_size(self) -> int:
        """Samples consumed per step across all processes."""
        return self.per_process_batch_size * self.num_processes

    def __len__(self) -> int:
        whole = super().__len__()
        if self.num_processes == 1 or self.even_batches or self.drop_last or whole == 0:
            return whole
        source = self.dataset if isinstance(self.dataset, IterableDataset) else self.sampler
        total = len(cast(Sized, source))  # super().__len__() has taken a length already
        last_rows = total - (whole - 1) * self.total_batch_size
        return whole - 1 + (1 if last_rows > self.process_index * self.per_process_batch_size else 0)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass use epoch `epoch` (forwarded to the sampler and the dataset)."""
        self.epoch = int(epoch)
        self._forward_epoch()

    def _forward_epoch(self) -> None:
        targets: list[Any] = [self.sampler, getattr(self.batch_sampler, "sampler", None), self.dataset]
        for target in {id(t): t for t in targets if hasattr(t, "set_epoch")}.values():
            target.set_epoch(self.epoch)

    def _place(self, batch: Any) -> Any:
        if self.device is None:
            return batch
        return send_to_device(batch, self.device, non_blocking=self.non_blocking)

    # DataLoader.__iter__ is typed as torch's own iterator class; callers need only an iterator.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        self._forward_epoch()
        self.end_of_dataloader = False
        self.remainder = -1
        self._gradient_state.register_loader(self)
        try:
            for message in self._messages():
                if message.error is not None:
                    raise DispatchError(message.error)
                if message.has_batch:
                    self.end_of_dataloader = message.last_batch
                    self.remainder = message.remainder
                    yield self._place(message.batch)
                if message.final:
                    self.end_of_dataloader = True
                    return
        finally:
            self._gradient_state.unregister_loader(self)
            self.epoch += 1

    def _plan(self) -> Iterator[list[Dispatch]]:
        # A generator, so that even starting the underlying loader happens inside `next(steps)`.
        yield from plan_dispatch(
            super().__iter__(),
            self.num_processes,
            self.total_batch_size,
            even_batches=self.even_batches,
            drop_last=self.drop_last,
        )

    def _messages(self) -> Iterator[Dispatch]:
        """Yield this rank's message of each step, reading or receiving them."""
        if self.num_processes == 1:
            return (step[0] for step in self._plan())
        if self.process_index == 0:
            return self._send_all()
        return self._receive_all()

    def _send_all(self) -> Iterator[Dispatch]:
        steps = self._plan()
        for index in itertools.count():
            try:
                step = next(steps)
                # Pickled here, so that an unpicklable batch is reported like a failed read.
                payloads = [b""] + [pickle.dumps(_on_cpu(m), pickle.HIGHEST_PROTOCOL) for m in step[1:]]
            except StopIteration:
                return
            except Exception as error:
                _scatter([b""] + [pickle.dumps(_failure(error, index))] * (self.num_processes - 1))
                raise
            _scatter(payloads)
            yield step[0]

    def _receive_all(self) -> Iterator[Dispatch]:
        while True:
            message = pickle.loads(_scatter(None))
            yield message
            if message.final:
                return


def _on_cpu(message: Dispatch) -> Dispatch:
    # A batch read onto an accelerator would otherwise be unpickled onto the main process's device.
    return replace(message, batch=send_to_device(message.batch, "cpu")) if message.has_batch else message


@names_collective("the dispatched data loader (waiting for the main process's next batch)")
def _scatter(payloads: list[bytes] | None) -> bytes:
    """Send rank r `payloads[r]` from the main process (which passes None elsewhere); return ours."""
    return PartialState().communicator.scatter_object(payloads, 0)
