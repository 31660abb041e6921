"""The errors of saving and loading a checkpoint, and how one rank's failure reaches every rank.

A save or a load is collective: when one rank fails, every rank raises (that rank its own error),
so that none waits in a collective that the failed rank never joins.
"""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, corrupt or from another set-up; the message names the file."""


class CheckpointTargetError(CheckpointError):
    """save_state refused its folder: saving there would replace or delete what no save wrote."""


class CheckpointWriteError(CheckpointError):
    """Writing a checkpoint failed (a full disk, no permission); the previous checkpoint is intact."""


def raise_any_failure(own: BaseException | None, messages: list[str | None], operation: str) -> None:
    """Raise this rank's `own` failure, else a CheckpointError for the first rank that reported one."""
    if own is not None:
        raise own
    for rank, message in enumerate(messages):
        if message is not None:
            raise CheckpointError(f"{operation} failed on rank {rank}: {message}")
