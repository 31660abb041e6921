"""`accel.launchers`: where Accelerate's scripts import `notebook_launcher` from."""

from __future__ import annotations

from accel_launch import notebook_launcher

__all__ = ["notebook_launcher"]
