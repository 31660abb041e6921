"""`accel.state`: Accelerate's state names, the objects of `accel_state`."""

from accel_state import AcceleratorState, DistributedType, GradientState, PartialState

__all__ = ["AcceleratorState", "DistributedType", "GradientState", "PartialState"]
