"""Checkpoints: finding shard files, reading them lazily, and loading them into a (meta) model."""
