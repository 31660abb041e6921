"""The scripts the figures start, in fresh processes (under torchrun, `accel launch` or plain
`python`): block jobs (`*_loop.py`, `gpu_precision.py`) speak `serve.py`'s protocol, one-shot jobs
(`*_job.py`) answer once through `benchmarks.jobs.emit`, and `world_start.py` is only timed; with
their helpers (`serve.py`, `job_exit.py`, `folders.py`)."""
