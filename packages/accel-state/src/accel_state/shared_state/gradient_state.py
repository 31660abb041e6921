"""`GradientState`: what the training loop's step knows about the data it is consuming.

The data layer writes it (which loader is active, is this its last batch, how many real items the
last global batch holds) and the precision/accumulation layer and `gather_for_metrics` read it;
keeping it here lets those layers cooperate without importing each other.
"""

from __future__ import annotations

from typing import Any

from accel_state.shared_state.gradient_accumulation import GradientAccumulationPlugin
from accel_state.shared_state.storage import SharedDict


class GradientState:
    """Shared flags of the current step: sync or accumulate, end of data, last-batch remainder."""

    _shared_state = SharedDict()

    def __init__(
        self,
        gradient_accumulation_steps: int | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
    ) -> None:
        # One lookup of the shared dict: gather_for_metrics builds this on every call.
        shared = self.__dict__ = self._shared_state
        if not shared:
            self.sync_gradients = True
            self.num_steps = 1
            self.backward_calls = 0  # lets an optimizer tell whether gradients are pending
            self.active_dataloaders: list[Any] = []
            self.plugin = GradientAccumulationPlugin()
        if gradient_accumulation_plugin is not None:
            self.plugin = gradient_accumulation_plugin
            if gradient_accumulation_plugin.num_steps is not None:
                self.num_steps = gradient_accumulation_plugin.num_steps
        if gradient_accumulation_steps is not None:
            self.num_steps = gradient_accumulation_steps

    def __reduce__(self) -> tuple[type, tuple[()]]:
        # A pickled copy unpickles as this process's shared state, not as a detached snapshot.
        return (type(self), ())

    @classmethod
    def _reset_state(cls) -> None:
        # Clear, then fill the defaults back in: instances built before the reset share this dict.
        cls._shared_state.clear()
        cls()

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        """The accumulation plugin's fields that differ from its defaults (Accelerate's name)."""
        return self.plugin.to_kwargs()

    @property
    def adjust_scheduler(self) -> bool:
        """Whether the scheduler's step count is kept right on accumulation steps (from the plugin)."""
        return self.plugin.adjust_scheduler

    @property
    def sync_with_dataloader(self) -> bool:
        """Whether the last batch of a loader always syncs and steps (from the plugin)."""
        return self.plugin.sync_with_dataloader

    @property
    def sync_each_batch(self) -> bool:
        """Whether every batch all-reduces even while accumulating, to save memory (from the plugin)."""
        return self.plugin.sync_each_batch

    @property
    def active_dataloader(self) -> Any:
        """The innermost loader being iterated, or None."""
        return self.active_dataloaders[-1] if self.active_dataloaders else None

    @property
    def in_dataloader(self) -> bool:
        """Whether a prepared loader is being iterated now."""
        return bool(self.active_dataloaders)

    @property
    def end_of_dataloader(self) -> bool:
        """Whether the loader being iterated has handed out its last batch."""
        loader = self.active_dataloader
        return bool(loader is not None and getattr(loader, "end_of_dataloader", False))

    @property
    def remainder(self) -> int:
        """Real items in the active loader's last global batch; -1 when unknown."""
        loader = self.active_dataloader
        return -1 if loader is None else getattr(loader, "remainder", -1)

    # What the other layers call: data loaders while they are iterated, the facade at each step.
    def register_loader(self, loader: Any) -> None:
        """Make `loader` the active one (innermost) while it is being iterated."""
        self.active_dataloaders.append(loader)

    def unregister_loader(self, loader: Any) -> None:
        """Forget `loader` when its iteration ends (a loader not registered is ignored)."""
        if loader in self.active_dataloaders:
            self.active_dataloaders.remove(loader)

    def set_sync_gradients(self, sync: bool) -> None:
        """Say whether this step all-reduces and steps (False on accumulation steps)."""
        self.sync_gradients = sync

    # Accelerate's names.
    _add_dataloader = register_loader
    _remove_dataloader = unregister_loader
    _set_sync_gradients = set_sync_gradients
