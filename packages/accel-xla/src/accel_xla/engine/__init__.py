"""PyTorch/XLA behind the Backend seam: set-up, collectives, placement, random state, the step's graph."""
