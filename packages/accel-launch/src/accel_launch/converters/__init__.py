"""Commands that rewrite a config file for an engine's newer version (Accelerate's `accelerate
to-fsdp2`). Each is registered in the `accel.commands` entry points of this package's metadata, which
the `accel` group lists beside its own commands: the group names no engine."""
