"""The figures of `python -m benchmarks`: each module (`--only <name>`) exposes `measure(options)`."""
