"""Dispatch: placing a model along a device map, whole-model offload, and load-then-dispatch."""
