"""The in-tree backends (native DDP, FSDP2) and what every backend shares."""
