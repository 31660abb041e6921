"""`python -m benchmarks.gpu_check`: what benchmarks/gpu_check.sh runs."""

from benchmarks.gpu_check.cli import main

if __name__ == "__main__":
    main()
