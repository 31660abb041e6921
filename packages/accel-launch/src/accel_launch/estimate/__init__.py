"""`accel estimate-memory`: a model built on the meta device, counted, and its memory estimated."""
