"""The header ranks exchange before a collective: HEADER_LENGTH int64 values saying what each brings.

A collective over inputs that differ between ranks returns another rank's bytes reinterpreted, or
aborts a rank inside the transport. So before one, every rank describes its call (operation,
arguments) and its input (nesting structure; dtype, device and shape of every tensor), encodes the
description into HEADER_LENGTH int64 values, and the ranks exchange headers in one small
all_gather of HEADER_BYTES plus the communicator's inline capacity (`capacity`). That size
depends only on earlier exchanges, which every rank saw alike, never on this call's input, so the
exchange cannot mismatch itself; every rank then holds every header, so all of them see a
difference at once and can raise together.

Header: MAGIC, a digest of the call, a digest of the input, the number of tensors, the number of
sizes carried (the fields every rank must share), then this rank's payload length and, for
padding and uneven gathers, each tensor's size along the padded dim. Digests are 64-bit BLAKE2b,
the same in every process (unlike Python's `hash` of a string). After the header, each rank's
exchange holds the capacity's bytes of payload: inputs that fit (a metric, a seed, a pickled
list, a batch of predictions up to INLINE_CEILING) travel in the header exchange itself, so
checking them costs no extra round trip. Each header also says how many payload bytes its rank
wanted to send (NEED_FIELD), from which every rank computes the same capacity for the next call.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from array import array
from collections.abc import Mapping
from typing import Any

import numpy
import torch

HEADER_LENGTH = 32
MAGIC = 0x616363656C000003  # "accel" and the layout version
COMPARED_FIELDS = 5  # magic, call digest, input digest, tensor count, sizes carried
CALL_FIELD = 1
PAYLOAD_FIELD = 5  # this rank's payload length in bytes, or NO_PAYLOAD
NEED_FIELD = 6  # the payload bytes this rank wanted to send inline (0: none, or more than the ceiling)
FIXED_FIELDS = 7
SIZE_CAPACITY = HEADER_LENGTH - FIXED_FIELDS
HEADER_BYTES = HEADER_LENGTH * 8
INLINE_FLOOR = 1024  # the payload every exchange carries at least
INLINE_CEILING = 64 * 1024  # inputs larger than this never travel inline (they take their own collective)
NO_PAYLOAD = -1
_ALIGNMENT = 16  # of payload offsets, so that the bytes of any dtype can be viewed in place
OUT_OF_RANGE = -1  # the size of a tensor that has no dim `size_dim` (it is left alone)
TENSOR = "\x00"  # stands for a tensor in a structure text; messages put its shape there


@dataclasses.dataclass(frozen=True)
class Description:
    """What one rank brings to a collective, in words every rank can compare and print."""

    operation: str
    arguments: str = ""
    structure: str = TENSOR  # the nesting, TENSOR for each tensor, type names for other leaves
    tensors: tuple[tuple[str, str, tuple[int, ...]], ...] = ()  # (dtype, device type, shape)
    size_dim: int | None = None  # the dim whose size may differ between ranks
    problem: str = ""  # why this rank cannot take part at all (an object that does not pickle)
    # Debug mode only (0 and "" otherwise): the collective's sequence number on this rank and
    # "op #n at file:line", so that ranks in different collectives are told both call sites.
    sequence: int = 0
    site: str = ""

    def compared_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Return each tensor's shape with the size along `size_dim` blanked out."""
        return tuple(_blank(shape, self.size_dim) for _, _, shape in self.tensors)

    def sizes(self) -> list[int]:
        """Return each tensor's size along `size_dim` (OUT_OF_RANGE where it has no such dim)."""
        if self.size_dim is None:
            return []
        return [_size_along(shape, self.size_dim) for _, _, shape in self.tensors]

    def comparable(self) -> tuple[Any, ...]:
        """Return what must be equal on every rank."""
        kinds = tuple((dtype, device) for dtype, device, _ in self.tensors)
        shapes = self.compared_shapes()
        return (self.sequence, self.operation, self.arguments, self.structure, kinds, shapes, self.problem)


def _size_along(shape: tuple[int, ...], dim: int) -> int:
    if not -len(shape) <= dim < len(shape):
        return OUT_OF_RANGE
    return shape[dim]


def _blank(shape: tuple[int, ...], dim: int | None) -> tuple[int, ...]:
    if dim is None or not -len(shape) <= dim < len(shape):
        return shape
    axis = dim % len(shape)
    return shape[:axis] + (-1,) + shape[axis + 1 :]


def describe(operation: str, data: Any, *, arguments: str = "", size_dim: int | None = None) -> Description:
    """Return the description of `data` (a tensor or a nest of them) for `operation`."""
    if isinstance(data, torch.Tensor):  # the common case, without the walk
        return Description(operation, arguments, TENSOR, (_tensor_facts(data),), size_dim)
    parts: list[str] = []
    tensors: list[tuple[str, str, tuple[int, ...]]] = []
    _walk(data, parts, tensors)
    return Description(operation, arguments, "".join(parts), tuple(tensors), size_dim)


def describe_object(operation: str, arguments: str = "", problem: str = "") -> Description:
    """Return the description of a pickled object's part in `operation` (only the call must agree)."""
    return Description(operation, arguments, "object", (), None, problem)


def _tensor_facts(tensor: torch.Tensor) -> tuple[str, str, tuple[int, ...]]:
    return str(tensor.dtype).removeprefix("torch."), tensor.device.type, tuple(tensor.shape)


def _walk(data: Any, parts: list[str], tensors: list[tuple[str, str, tuple[int, ...]]]) -> None:
    # The order of nested.recursively_apply, so that the n-th tensor here is the n-th one it visits.
    if isinstance(data, torch.Tensor):
        parts.append(TENSOR)
        tensors.append(_tensor_facts(data))
    elif isinstance(data, (list, tuple)):
        parts.append(f"{type(data).__name__}[")
        for index, item in enumerate(data):
            parts.append(", " if index else "")
            _walk(item, parts, tensors)
        parts.append("]")
    elif isinstance(data, Mapping):
        parts.append(f"{type(data).__name__}{{")
        for index, (key, value) in enumerate(data.items()):
            parts.append(f"{', ' if index else ''}{key!r}: ")
            _walk(value, parts, tensors)
        parts.append("}")
    elif dataclasses.is_dataclass(data) and not isinstance(data, type):
        parts.append(f"{type(data).__name__}(")
        for index, field in enumerate(f for f in dataclasses.fields(data) if f.init):
            parts.append(f"{', ' if index else ''}{field.name}=")
            _walk(getattr(data, field.name), parts, tensors)
        parts.append(")")
    else:
        parts.append(type(data).__name__)  # not a tensor: the collective will refuse it on every rank


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


@functools.lru_cache(maxsize=256)
def _call_digest(operation: str, arguments: str) -> int:
    return _digest(f"{operation}({arguments})")


@functools.lru_cache(maxsize=256)
def _tensor_digest(dtype: str, device: str, shape: tuple[int, ...]) -> int:
    return _digest(f"{dtype}/{device}/{shape}")


def _input_digest(description: Description) -> int:
    if description.structure == TENSOR and len(description.tensors) == 1 and not description.problem:
        dtype, device, _ = description.tensors[0]
        return _tensor_digest(dtype, device, description.compared_shapes()[0])
    kinds = ";".join(f"{dtype}/{device}" for dtype, device, _ in description.tensors)
    return _digest(f"{description.structure}|{kinds}|{description.compared_shapes()}|{description.problem}")


def encode(description: Description, payload_length: int = NO_PAYLOAD, need: int = 0) -> list[int]:
    """Return the HEADER_LENGTH int64 values that stand for `description` in the exchange."""
    sizes = description.sizes()
    carried = sizes if len(sizes) <= SIZE_CAPACITY else []
    header = [
        MAGIC,
        _call_digest(description.operation, description.arguments),
        _input_digest(description),
        len(description.tensors),
        len(carried),
        payload_length,
        need,
        *carried,
    ]
    return header + [0] * (HEADER_LENGTH - len(header))


def headers_agree(headers: list[list[int]]) -> bool:
    """Return True when every rank called the same operation with inputs that fit together."""
    reference = headers[0][:COMPARED_FIELDS]
    return reference[0] == MAGIC and all(header[:COMPARED_FIELDS] == reference for header in headers)


def carried_sizes(headers: list[list[int]]) -> list[list[int]] | None:
    """Return, per tensor, every rank's size along the padded dim; None when the header could not hold them.

    Only meaningful once `headers_agree`: then every rank carries the same number of sizes.
    """
    count, carried = headers[0][3], headers[0][4]
    if carried != count:
        return None
    return [[header[FIXED_FIELDS + index] for header in headers] for index in range(count)]


def payload_lengths(headers: list[list[int]]) -> list[int]:
    """Return each rank's payload length (NO_PAYLOAD for a rank whose input did not travel inline)."""
    return [header[PAYLOAD_FIELD] for header in headers]


def call_kind(headers: list[list[int]]) -> int:
    """Return the digest of the call (operation and arguments) the ranks agreed on."""
    return headers[0][CALL_FIELD]


def needs(headers: list[list[int]]) -> list[int]:
    """Return the payload bytes each rank wanted to send inline (what the next capacity is made of)."""
    return [header[NEED_FIELD] for header in headers]


def payload_layout(lengths: list[int]) -> tuple[list[int], int] | None:
    """Return where pieces of `lengths` bytes go in a payload, and its length; None when there are none."""
    offsets, end = [], 0
    for length in lengths:
        start = -(-end // _ALIGNMENT) * _ALIGNMENT
        offsets.append(start)
        end = start + length
    return (offsets, end) if offsets else None


def tensor_bytes(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor] | None:
    """Return each tensor's bytes (a view where possible), or None when one is not on `device`'s type.

    That depends only on what the header compares (device types), like whether they fit, so ranks
    whose headers agree all send their tensors along, or none does.
    """
    pieces = []
    for tensor in tensors:
        if tensor.device.type != device.type:
            return None
        if tensor.requires_grad:
            tensor = tensor.detach()
        if tensor.is_conj() or tensor.is_neg():
            tensor = tensor.resolve_conj().resolve_neg()
        pieces.append(tensor.reshape(-1).view(torch.uint8))
    return pieces


@functools.lru_cache(maxsize=16)
def _zeros(device: torch.device, length: int) -> torch.Tensor:
    return torch.zeros(length, dtype=torch.uint8, device=device)


def exchange_tensor(
    description: Description,
    device: torch.device,
    pieces: list[torch.Tensor] | None = None,
    capacity: int = INLINE_FLOOR,
) -> tuple[torch.Tensor, list[int]]:
    """Return what this rank sends (HEADER_BYTES, then `capacity` bytes of payload) and the offsets.

    `pieces` (uint8, on `device`) travel as the payload when they fit in `capacity`; the offsets
    are empty when not. The header records the bytes they needed either way.
    """
    layout = payload_layout([piece.numel() for piece in pieces]) if pieces else None
    need = layout[1] if layout is not None and layout[1] <= INLINE_CEILING else 0
    if layout is None or layout[1] > capacity:
        layout = None
    offsets, length = layout if layout is not None else ([], NO_PAYLOAD)
    header = encode(description, length, need)
    if device.type == "cpu":
        return _cpu_exchange(header, pieces if layout is not None else None, offsets, capacity), offsets
    zeros = _zeros(device, capacity)
    parts = [torch.frombuffer(array("q", header), dtype=torch.uint8).to(device)]
    used = 0
    if pieces and layout is not None:
        for piece, offset in zip(pieces, offsets, strict=True):
            if offset > used:  # alignment
                parts.append(zeros[: offset - used])
            parts.append(piece)
            used = offset + piece.numel()
    if used < capacity:
        parts.append(zeros[: capacity - used])
    return torch.cat(parts), offsets


def _cpu_exchange(
    header: list[int], pieces: list[torch.Tensor] | None, offsets: list[int], capacity: int
) -> torch.Tensor:
    # numpy's slicing costs a fraction of torch's per call: this is every checked collective's path.
    exchange = numpy.zeros(HEADER_BYTES + capacity, dtype=numpy.uint8)
    exchange[:HEADER_BYTES].view(numpy.int64)[:] = header
    for piece, offset in zip(pieces or (), offsets, strict=False):
        start = HEADER_BYTES + offset
        exchange[start : start + piece.numel()] = piece.numpy()
    return torch.from_numpy(exchange)


def read_headers(table: torch.Tensor) -> list[list[int]]:
    """Return every rank's header from the gathered exchanges (world size rows)."""
    if table.device.type == "cpu":
        return table.numpy()[:, :HEADER_BYTES].view(numpy.int64).tolist()
    return table[:, :HEADER_BYTES].view(torch.int64).tolist()


def unpack_gathered(payloads: torch.Tensor, offset: int, like: torch.Tensor) -> torch.Tensor:
    """Return every rank's tensor shaped like `like`, concatenated along dim 0 (a new tensor)."""
    length = like.numel() * like.element_size()
    rows = payloads[:, offset : offset + length].contiguous().view(like.dtype)
    shape = tuple(like.shape) or (1,)
    gathered = rows.reshape((shape[0] * payloads.shape[0],) + shape[1:])
    return gathered if gathered.device == like.device else gathered.to(like.device)


def unpack_one(payloads: torch.Tensor, rank: int, offset: int, like: torch.Tensor) -> torch.Tensor:
    """Return rank `rank`'s tensor shaped like `like` (a view of the payloads)."""
    length = like.numel() * like.element_size()
    return payloads[rank, offset : offset + length].view(like.dtype).reshape(like.shape)
