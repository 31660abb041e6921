"""Collectives over nested tensors, with the cross-rank check of their inputs."""
