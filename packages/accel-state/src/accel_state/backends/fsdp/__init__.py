"""The FSDP2 backend: fully_shard, its plugin, wrapping policy and checkpoints."""
