"""The shared-state singletons (PartialState, AcceleratorState, GradientState) and their helpers."""
