"""Head-to-head benchmarks, accel vs raw PyTorch vs Hugging Face Accelerate: `python -m benchmarks`."""
