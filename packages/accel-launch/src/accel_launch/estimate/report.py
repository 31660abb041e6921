"""What `accel estimate-memory` prints: a table for people, or one JSON object for scripts."""

from __future__ import annotations

from typing import Any

from accel_launch.estimate.footprint import DtypeEstimate, ModelCount

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(size: int | None) -> str:
    """Return `size` in binary units with two decimals ("1.50 GiB"), or "-" for no value."""
    if size is None:
        return "-"
    value = float(size)
    for unit in UNITS:
        if value < 1024 or unit == UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def as_json(
    model: str, count: ModelCount, rows: list[DtypeEstimate], num_processes: int | None
) -> dict[str, Any]:
    """Return the estimate as one JSON-ready object (sizes in bytes)."""
    return {
        "model": model,
        "parameters": count.parameters,
        "largest_layer": {"name": count.largest_layer, "elements": count.largest_layer_elements},
        "num_processes": num_processes,
        "dtypes": {
            row.dtype: {
                "total_bytes": row.total_bytes,
                "largest_layer_bytes": row.largest_layer_bytes,
                "adamw_state_bytes": row.adamw_state_bytes,
                "training_peak_bytes": row.training_peak_bytes,
                "training_per_process_bytes": row.training_per_process_bytes,
            }
            for row in rows
        },
    }


def as_table(model: str, count: ModelCount, rows: list[DtypeEstimate], num_processes: int | None) -> str:
    """Return the estimate as an aligned text table with a header line."""
    header = ["dtype", "total size", "largest layer", "AdamW states", "training peak"]
    if num_processes is not None:
        header.append(f"per process (FSDP x{num_processes})")
    lines = [
        [
            row.dtype,
            human_bytes(row.total_bytes),
            human_bytes(row.largest_layer_bytes),
            human_bytes(row.adamw_state_bytes),
            human_bytes(row.training_peak_bytes),
            *([human_bytes(row.training_per_process_bytes)] if num_processes is not None else []),
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    rule = "  ".join("-" * width for width in widths)
    text = [
        f"Memory estimate of {model}: {count.parameters:,} parameters; "
        f"largest layer {count.largest_layer} ({count.largest_layer_elements:,} elements)",
        "  ".join(cell.ljust(width) for cell, width in zip(header, widths, strict=True)),
        rule,
        *("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines),
        "Training: AdamW, batch size 1, activations not counted; float16/bfloat16 rows are mixed "
        "precision (fp32 weights, half-precision compute).",
    ]
    return "\n".join(line.rstrip() for line in text)
