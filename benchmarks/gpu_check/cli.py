"""`bash benchmarks/gpu_check.sh [--dry-run] [--output DIR]`: run the steps, write the record, exit 1 if
one failed; without a CUDA device and without --dry-run, stop at once saying so."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import launchers, machine
from benchmarks.gpu_check import record as report
from benchmarks.gpu_check import steps
from benchmarks.gpu_check.commands import Run
from benchmarks.gpu_check.sources import package_metadata

REPO_ROOT = launchers.REPO_ROOT
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "gpu_check"
NO_CUDA = "no CUDA device: run with --dry-run on CPU"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bash benchmarks/gpu_check.sh", description=__doc__.split("\n\n")[0].replace("\n", " ")
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="every step on the CPU with tiny sizes (seconds): a smoke test"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"folder of the JSON, markdown and logs (default: {DEFAULT_OUTPUT.relative_to(REPO_ROOT)})",
    )
    names = [name for name, _, _ in steps.STEPS]
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=None,
        metavar="STEP[,STEP...]",
        help=f"run these steps only ({', '.join(names[1:])}); {names[0]} always runs first",
    )
    args = parser.parse_args(argv)
    if args.only == []:
        parser.error(f"--only: names no step (steps: {', '.join(names[1:])})")
    unknown = [name for name in args.only or [] if name not in names]
    if unknown:
        parser.error(f"--only: no step named {', '.join(map(repr, unknown))} (steps: {', '.join(names)})")
    return args


def cuda_missing() -> str | None:
    """Return None when torch sees a CUDA device, else why not (in this process: one import of torch)."""
    if not any(Path("/dev").glob("nvidia[0-9]*")) and not Path("/dev/kfd").exists():
        return "no /dev/nvidia* or /dev/kfd on this machine"
    try:
        import torch
    except ImportError as error:
        return f"torch does not import ({error})"
    return None if torch.cuda.is_available() else "torch.cuda.is_available() is False"


def header(args: argparse.Namespace, started: float, environment: dict[str, Any]) -> dict[str, Any]:
    """Return what the record says first: when, where (the CUDA device the environment step saw), how."""
    described = machine.describe()
    described["device"] = environment.get("device_name") or "no CUDA device"
    versions = machine.versions()
    # accel may run from its source folders, which this process reads no metadata of.
    versions["accel"] = versions.get("accel") or environment.get("accel")
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "dry_run": args.dry_run,
        "command": shlex.join(["bash", "benchmarks/gpu_check.sh", *sys.argv[1:]]),
        "machine": described,
        "versions": {**versions, **modules_found()},
        "seconds": round(time.perf_counter() - started, 1),
    }


def modules_found() -> dict[str, str | None]:
    """Return 'importable' or None for the modules that decide which steps can run."""
    names = ("pytest", "click", "yaml", "safetensors", "xxhash")
    return {name: "importable" if importlib.util.find_spec(name) else None for name in names}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    missing = None if args.dry_run else cuda_missing()
    if missing:
        raise SystemExit(f"gpu_check: {NO_CUDA} ({missing})")
    started = time.perf_counter()
    output = args.output.resolve()
    with tempfile.TemporaryDirectory(prefix="gpu-check-metadata-") as metadata_folder:
        run = Run(args.dry_run, output, Path(metadata_folder))
        written = package_metadata(run.metadata_folder)
        if written:
            print(f"gpu_check: entry points of {', '.join(written)} declared from packages/", file=sys.stderr)

        def write_so_far(done: list[steps.StepResult], pending: int) -> None:
            if pending:
                report.write(report.run_record(header(args, started, done[0].numbers), done, pending), output)

        results = steps.run_all(run, started, write_so_far, args.only)
    record = report.run_record(header(args, started, results[0].numbers), results)
    as_json, as_markdown = report.write(record, output)
    print(report.markdown(record))
    print(f"gpu_check: {record['status']}; {as_json} and {as_markdown}", file=sys.stderr)
    if record["status"] == report.FAILED:
        sys.exit(1)
