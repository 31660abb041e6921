"""Scripts the figures start under a launcher (torchrun, `accel launch`), speaking `serve.py`'s protocol."""
