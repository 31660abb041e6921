"""Byte sizes: parsing "48MiB"-style budgets, bytes per dtype, and printing sizes in errors."""

from __future__ import annotations

import re

import torch

from accel_big_modeling.errors import BigModelingError

# Accelerate's units: decimal KB/MB/GB, binary KiB/MiB/GiB; a lowercase "b" (as in "5Gb") means bits.
_DECIMAL = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_BINARY = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]+)\s*$")


def convert_file_size_to_int(size: int | str) -> int:
    """Return `size` in bytes: an int as is, or a string such as "5GB" (1e9), "1.5GiB" (2**30), "500KB"."""
    if isinstance(size, bool):
        raise BigModelingError(f"memory size {size!r} is not a number of bytes or a string like '5GB'")
    if isinstance(size, int):
        if size < 0:
            raise BigModelingError(f"memory size {size!r} is negative")
        return size
    if not isinstance(size, str):
        raise BigModelingError(f"memory size {size!r} is not a number of bytes or a string like '5GB'")
    match = _SIZE.match(size)
    unit = match.group(2) if match else ""
    if match and unit.upper() in _BINARY:
        return int(float(match.group(1)) * _BINARY[unit.upper()])
    if match and unit.upper() in _DECIMAL:
        count = int(float(match.group(1)) * _DECIMAL[unit.upper()])
        return count // 8 if unit.endswith("b") else count
    raise BigModelingError(
        f"memory size {size!r} does not parse: use an int of bytes or a string like "
        "'500KB', '48MiB', '1.5GiB'"
    )


def dtype_byte_size(dtype: torch.dtype) -> float:
    """Return the bytes one element of `dtype` takes (1/8 for bool, as Accelerate counts it)."""
    if dtype == torch.bool:
        return 1 / 8
    return float(dtype.itemsize)


def as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Return the torch dtype that `dtype` ("float16", "torch.float16" or a dtype) names."""
    if isinstance(dtype, torch.dtype):
        return dtype
    found = getattr(torch, dtype.replace("torch.", ""), None)
    if not isinstance(found, torch.dtype):
        raise BigModelingError(f"dtype {dtype!r} is not a torch dtype")
    return found


def format_size(size: int | float) -> str:
    """Return `size` bytes as a short human string for messages ("4.0 MiB")."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} GiB"
