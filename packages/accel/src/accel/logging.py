"""`accel.logging`: Accelerate's `get_logger`, whose records are emitted on the main process only
unless a call asks for every process (`main_process_only=False`, optionally `in_order=True`)."""

from accel_state.shared_state.process_logging import LoggerStateError, MultiProcessAdapter, get_logger

__all__ = ["LoggerStateError", "MultiProcessAdapter", "get_logger"]
