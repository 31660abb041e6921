"""The native torch backend: one process, or many joined by DistributedDataParallel."""
