"""DeepSpeed's engine around the backend: process set-up, the objects it hands back, weights, teardown."""
