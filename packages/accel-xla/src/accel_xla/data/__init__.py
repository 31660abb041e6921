"""Batches for XLA: the device loader, and padding to static shapes."""
