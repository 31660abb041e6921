#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check/__init__.py says what it runs):
#   bash benchmarks/gpu_check.sh [--dry-run] [--output DIR] [--only STEP[,STEP...]]
# Runs with the python that has torch (first `python`, else `python3`; PYTHON=... to choose) and
# our packages from their source folders on PYTHONPATH: nothing is installed or fetched.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sources="$(ls -d "$root"/packages/*/src | tr '\n' ':')"
export PYTHONPATH="$root:${sources%:}${PYTHONPATH:+:$PYTHONPATH}"
python="${PYTHON:-$(command -v python || command -v python3)}"
exec "$python" -m benchmarks.gpu_check "$@"
