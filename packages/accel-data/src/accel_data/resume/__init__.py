"""Resuming mid-epoch: skip the first n batches without loading them."""
