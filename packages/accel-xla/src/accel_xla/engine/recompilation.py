"""Warns once when XLA compiles a new graph step after step: a recompilation storm.

XLA compiles one graph per distinct set of input shapes. A loop whose batches change shape
(sequences padded to the longest in each batch, a smaller last batch) compiles at almost every
step, which on a TPU costs more than the step itself: the costliest TPU mistake, and a silent one.
After the first steps (which compile the forward, backward and the optimizer's first updates),
`RecompilationWatch` counts the graphs XLA has compiled at each optimizer step and warns, naming
the batch shapes it saw, when the count grew at several steps in a row.
"""

from __future__ import annotations

import warnings

WARM_UP_STEPS = 2  # the first steps compile the step's graphs (and the optimizer's first-step state)
STORM_STEPS = 3  # new graphs at this many steps in a row, after the warm-up, is a storm


class RecompilationWarning(UserWarning):
    """XLA compiles new graphs step after step: the inputs' shapes change from step to step."""


def compiled_graphs() -> int:
    """Return how many graphs XLA has compiled in this process so far."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


class RecompilationWatch:
    """Reads XLA's compile count at each step; warns once on a storm."""

    def __init__(self, warm_up_steps: int = WARM_UP_STEPS, storm_steps: int = STORM_STEPS) -> None:
        self.warm_up_steps = warm_up_steps
        self.storm_steps = storm_steps
        self.steps = 0
        self.streak = 0
        self.warned = False
        self._last_count: int | None = None
        self._shapes: list[list[tuple[int, ...]]] = []  # batch shapes seen since the streak began

    def saw_batch(self, shapes: list[tuple[int, ...]]) -> None:
        """Note the shapes of a batch the loop received (kept while a streak lasts, for the message)."""
        if not self._shapes or self._shapes[-1] != shapes:
            self._shapes.append(shapes)
            del self._shapes[: -self.storm_steps - 1]

    def after_step(self) -> None:
        """Call after each optimizer step's sync: counts new graphs, warns on a storm."""
        if self.warned:
            return
        count = compiled_graphs()
        grew = self._last_count is not None and count > self._last_count
        self._last_count = count
        self.steps += 1
        if self.steps <= self.warm_up_steps:
            return
        self.streak = self.streak + 1 if grew else 0
        if self.streak >= self.storm_steps:
            self.warned = True
            warnings.warn(self._message(count), RecompilationWarning, stacklevel=4)

    def _message(self, count: int) -> str:
        seen = "; ".join(_describe(shapes) for shapes in self._shapes[-self.storm_steps :])
        where = f" The last batches' tensor shapes were: {seen}." if seen else ""
        return (
            f"XLA compiled new graphs at each of the last {self.streak} optimizer steps ({count} graphs "
            f"so far): the step's input shapes keep changing, and each new shape costs a compilation."
            f"{where} Pad inputs to a few fixed sizes (accel_xla.pad_to_multiple_of, or the tokenizer's "
            "padding='max_length'/pad_to_multiple_of) and drop or pad the last batch (drop_last=True)."
        )


def _describe(shapes: list[tuple[int, ...]]) -> str:
    return "[" + ", ".join("(" + ", ".join(str(n) for n in shape) + ")" for shape in shapes) + "]"
