"""Where the step's graph ends: the optimizer step runs it, and the loader need not run it again."""

from __future__ import annotations


class StepBoundary:
    """Whether the step's graph already ran (the optimizer step syncs) since the loop took a batch.

    A loader that syncs again before its next batch runs an empty graph, which on XLA's CPU
    device costs a tenth of a small model's step."""

    def __init__(self) -> None:
        self.synced = False

    def mark(self) -> None:
        """Note that the step's graph just ran."""
        self.synced = True

    def take(self) -> bool:
        """Return whether the step's graph ran since the last call."""
        synced, self.synced = self.synced, False
        return synced
