"""What the facade offers a training loop besides `prepare`/`backward`, one module per family of
methods: the kinds of prepared objects, process facts and control, cross-rank triggers, profiling,
and gathering for metrics."""
