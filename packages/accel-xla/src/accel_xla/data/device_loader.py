"""`XlaDeviceLoader`: a prepared loader whose batches reach the XLA device through `MpDeviceLoader`.

`MpDeviceLoader` iterates the wrapped loader in background threads and uploads batches ahead of
the training loop, so the wrapped loader's own bookkeeping (its end of data, its position for
`save_state`) runs ahead of what the loop has consumed. This wrapper keeps that bookkeeping for
the consumer: it looks one batch ahead itself (`end_of_dataloader`), is the loader accumulation
and `gather_for_metrics` read while the loop iterates it, and reports the consumed position.
Everything else (`len`, `set_epoch`, `remainder`, `total_batch_size`, ...) is the wrapped loader's.

Each pass is begun here, in the replica's own thread, before the upload thread takes it over: what
the wrapped loader does before its first batch (agreeing its generator's state with replica 0,
moving to the next epoch's shuffle) needs the replica's shared state and XLA device, which the
upload thread lacks (replicas that are threads keep both per thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch_xla.distributed.parallel_loader import MpDeviceLoader, ParallelLoader

from accel_state import GradientState
from accel_state.collectives.nested import tensor_leaves
from accel_xla.engine.step_boundary import StepBoundary

_END = object()
# MpDeviceLoader's own sync before every batch, pushed out of reach: with a StepBoundary the
# wrapper below syncs, only when the optimizer step has not just done it.
_NEVER = 2**62


class XlaDeviceLoader(MpDeviceLoader):
    """`loader`'s batches, uploaded to `device` in the background (the loader keeps them on the host)."""

    _parallel_loader: Any  # MpDeviceLoader's: the ParallelLoader of the pass in progress, or None

    def __init__(
        self,
        loader: Any,
        device: torch.device,
        on_batch: Callable[[list[tuple[int, ...]]], None] | None = None,
        boundary: StepBoundary | None = None,
        **parallel_loader_kwargs: Any,
    ) -> None:
        if getattr(loader, "device", None) is not None:
            loader.device = None  # the upload threads move the batches; the loader must not
        if boundary is not None:
            parallel_loader_kwargs.setdefault("batches_per_execution", _NEVER)
        super().__init__(loader, device, **parallel_loader_kwargs)
        self._gradient_state = GradientState()
        self._on_batch = on_batch
        self._boundary = boundary
        self.end_of_dataloader = False
        self._pass: list[Any] | None = None  # [epoch, batches consumed, finishing] while iterated

    @property
    def base_dataloader(self) -> Any:
        """The loader this one uploads from (Accelerate's name)."""
        return self._loader

    @property
    def device(self) -> torch.device:
        return self._device

    def __getattr__(self, name: str) -> Any:
        # Reached only for names this class lacks: they are the wrapped loader's.
        loader = self.__dict__.get("_loader")
        if loader is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(loader, name)

    def __iter__(self) -> Iterator[Any]:
        loader = self._loader
        position = [int(getattr(loader, "epoch", 0)), int(getattr(loader, "skip_batches", 0) or 0), False]
        batches = self._upload(_BegunPass(loader))
        if self._boundary is not None:
            batches = _synced_between_batches(batches, self._boundary)
        state = self._gradient_state
        self.end_of_dataloader = False
        self._pass = position
        state.register_loader(self)
        try:
            current = next(batches, _END)
            while current is not _END:
                upcoming = next(batches, _END)
                self.end_of_dataloader = upcoming is _END
                position[1] += 1
                position[2] = self.end_of_dataloader
                # The wrapped loader registers itself from the upload thread, possibly after us:
                # the loop's loader must be the one accumulation reads.
                state.unregister_loader(self)
                state.register_loader(self)
                if self._on_batch is not None:
                    self._on_batch([tuple(t.shape) for t in tensor_leaves(current)])
                yield current
                current = upcoming
            self.end_of_dataloader = True
        finally:
            state.unregister_loader(self)
            self._pass = None

    def _upload(self, batches: _BegunPass) -> Iterator[Any]:
        """MpDeviceLoader.__iter__ over a pass begun here rather than over the wrapped loader."""
        if self._parallel_loader is not None:
            self._parallel_loader.close()
        self._parallel_loader = ParallelLoader(batches, [self._device], **self._parallel_loader_kwargs)
        return iter(self._parallel_loader.per_device_loader(self._device))

    def state_dict(self) -> dict[str, Any]:
        """Return the wrapped loader's position as the loop consumed it (not as uploaded ahead)."""
        report = getattr(self._loader, "state_dict", None)
        saved = dict(report()) if callable(report) else {"epoch": int(getattr(self._loader, "epoch", 0))}
        if self._pass is not None:
            epoch, done, finishing = self._pass
            if finishing:
                epoch, done = epoch + 1, 0
            saved.update(epoch=epoch, batches_yielded=done)
        return saved


class _BegunPass:
    """One pass over `loader`, begun (up to its first batch) in the thread that builds this object;
    the upload thread iterates the rest."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._batches = iter(loader)
        self._first = next(self._batches, _END)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[Any]:
        if self._first is _END:
            return
        first, self._first = self._first, _END
        yield first
        yield from self._batches


def _synced_between_batches(batches: Iterator[Any], boundary: StepBoundary) -> Iterator[Any]:
    """Yield `batches`, running what is pending before taking each one (as MpDeviceLoader does)
    unless the optimizer step has just run it."""
    import torch_xla

    while True:
        if not boundary.take():
            torch_xla.sync()
        batch = next(batches, _END)
        if batch is _END:
            return
        yield batch
