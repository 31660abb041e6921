"""Offload storage: the folder format on disk and the mapping that reads it back."""
