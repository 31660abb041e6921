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

A larger gather of one tensor (up to BESIDE_CEILING) cannot ride in the header exchange, but once
a gather of that size followed the same call last time (`capacity` says when), each rank whose call
is a gather of exactly that size runs a second all_gather of its tensor beside the header exchange,
both in flight at once (PAYLOAD_FIELD says BESIDE). The check then costs no round trip of its own.
A rank whose call is anything else sends nothing beside, unless another rank's header says it did
(their calls differ, which the check refuses): it then sends that many zero bytes, so that every
rank runs the same collectives.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy
import torch

HEADER_LENGTH = 32
MAGIC = 0x616363656C000005  # "accel" and the layout version
COMPARED_FIELDS = 5  # magic, call digest, input digest, tensor count, sizes carried
CALL_FIELD = 1
INPUT_FIELD = 2
PAYLOAD_FIELD = 5  # this rank's payload length in bytes, NO_PAYLOAD, or BESIDE
# The payload bytes this rank wanted to send: inline (up to INLINE_CEILING), or beside the header
# exchange (one tensor of a call that can take it, up to BESIDE_CEILING); 0: none, or too many.
NEED_FIELD = 6
FIXED_FIELDS = 7
SIZE_CAPACITY = HEADER_LENGTH - FIXED_FIELDS
HEADER_BYTES = HEADER_LENGTH * 8
INLINE_FLOOR = 1024  # the payload every exchange carries at least
INLINE_CEILING = 64 * 1024  # inputs larger than this never travel inline (they take their own collective)
# One tensor up to this size may travel beside the header exchange. Above it the header's round trip
# is a few % of the transfer, and the two in flight measured no faster (8 MB on 2 CPU ranks: 1.03-1.18x
# a raw all_gather beside the header, 0.98-1.06x after it).
BESIDE_CEILING = 4 * 1024 * 1024
NO_PAYLOAD = -1
BESIDE = -2  # the payload length of a rank whose one piece travelled beside the header exchange
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
    if isinstance(data, torch.Tensor):  # the common case: no walk, and the same object as last time
        return _tensor_description(operation, arguments, data.dtype, data.device.type, data.shape, size_dim)
    parts: list[str] = []
    tensors: list[tuple[str, str, tuple[int, ...]]] = []
    _walk(data, parts, tensors)
    return Description(operation, arguments, "".join(parts), tuple(tensors), size_dim)


def describe_object(operation: str, arguments: str = "", problem: str = "") -> Description:
    """Return the description of a pickled object's part in `operation` (only the call must agree)."""
    return Description(operation, arguments, "object", (), None, problem)


def _tensor_facts(tensor: torch.Tensor) -> tuple[str, str, tuple[int, ...]]:
    return str(tensor.dtype).removeprefix("torch."), tensor.device.type, tuple(tensor.shape)


@functools.lru_cache(maxsize=512)
def _tensor_description(
    operation: str, arguments: str, dtype: torch.dtype, device: str, shape: torch.Size, size_dim: int | None
) -> Description:
    # A loop calls the same collective on the same shapes: its description (and so its encoded
    # header, see `encoded`) is built once.
    facts = (str(dtype).removeprefix("torch."), device, tuple(shape))
    return Description(operation, arguments, TENSOR, (facts,), size_dim)


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


@functools.lru_cache(maxsize=512)
def encoded(description: Description, payload_length: int = NO_PAYLOAD, need: int = 0) -> numpy.ndarray:
    """Return `encode`'s header as HEADER_BYTES read-only bytes, built once per description."""
    header = numpy.array(encode(description, payload_length, need), dtype=numpy.int64).view(numpy.uint8)
    header.flags.writeable = False
    return header


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
    """Return each rank's payload length (NO_PAYLOAD for a rank whose input did not travel inline,
    BESIDE for one whose input travelled beside the header exchange)."""
    return [header[PAYLOAD_FIELD] for header in headers]


def call_kind(headers: list[list[int]]) -> int:
    """Return the digest of the call (operation and arguments) the ranks agreed on."""
    return headers[0][CALL_FIELD]


def exact_call(headers: list[list[int]]) -> tuple[int, int]:
    """Return the digests of the call and of its input (structure, dtypes, shapes) the ranks agreed on."""
    return headers[0][CALL_FIELD], headers[0][INPUT_FIELD]


def needs(headers: list[list[int]]) -> list[int]:
    """Return the payload bytes each rank wanted to send (what the next capacity is made of)."""
    return [header[NEED_FIELD] for header in headers]


def payload_layout(lengths: list[int]) -> tuple[list[int], int] | None:
    """Return where pieces of `lengths` bytes go in a payload, and its length; None when there are none."""
    offsets, end = [], 0
    for length in lengths:
        start = -(-end // _ALIGNMENT) * _ALIGNMENT
        offsets.append(start)
        end = start + length
    return (offsets, end) if offsets else None


# Payloads on the host are numpy arrays: numpy's slicing, views and copies cost a fraction of
# torch's per call, and this is every checked collective's path.
Payloads = Any  # (world size, capacity) uint8: a numpy array on the host, a tensor on an accelerator
Piece = Any  # one tensor's bytes, 1-D uint8: a numpy array on the host, a tensor on an accelerator
_NUMPY_DTYPES = {
    dtype: numpy.dtype(name)
    for dtype, name in (
        (torch.float64, "float64"),
        (torch.float32, "float32"),
        (torch.float16, "float16"),
        (torch.int64, "int64"),
        (torch.int32, "int32"),
        (torch.int16, "int16"),
        (torch.int8, "int8"),
        (torch.uint8, "uint8"),
        (torch.bool, "bool"),
        (torch.complex128, "complex128"),
        (torch.complex64, "complex64"),
    )
}


def numpy_dtype(dtype: torch.dtype) -> numpy.dtype | None:
    """Return numpy's dtype for torch's `dtype`, or None where numpy has none (bfloat16, float8)."""
    return _NUMPY_DTYPES.get(dtype)


def tensor_bytes(tensors: list[torch.Tensor], device: torch.device) -> list[Piece] | None:
    """Return each tensor's bytes (a view where possible), or None when one is not on `device`'s type.

    That depends only on what the header compares (device types), like whether they fit, so ranks
    whose headers agree all send their tensors along, or none does.
    """
    pieces: list[Piece] = []
    host = device.type == "cpu"
    for tensor in tensors:
        if tensor.device.type != device.type:
            return None
        if tensor.requires_grad:
            tensor = tensor.detach()
        if tensor.is_conj() or tensor.is_neg():
            tensor = tensor.resolve_conj().resolve_neg()
        if not tensor.is_contiguous():  # a slice x[::2], an expand: their bytes are not one run
            tensor = tensor.contiguous()
        if host and tensor.dtype in _NUMPY_DTYPES:
            pieces.append(tensor.numpy().reshape(-1).view(numpy.uint8))
        elif host:
            pieces.append(tensor.reshape(-1).view(torch.uint8).numpy())
        else:
            pieces.append(tensor.reshape(-1).view(torch.uint8))
    return pieces


def _length(piece: Piece) -> int:
    return int(piece.size if isinstance(piece, numpy.ndarray) else piece.numel())


@functools.lru_cache(maxsize=16)
def _zeros(device: torch.device, length: int) -> torch.Tensor:
    return torch.zeros(length, dtype=torch.uint8, device=device)


def plan_exchange(
    description: Description,
    pieces: list[Piece] | None,
    capacity: int,
    *,
    beside_ok: bool = False,
    beside: int = 0,
) -> tuple[numpy.ndarray, list[int]]:
    """Return this rank's encoded header and where its pieces lie in the payload.

    The offsets are empty when the pieces do not fit in `capacity`; the header records the bytes
    they needed either way. With `beside_ok` (a call that can take one tensor whole from the
    exchange beside the header's), a single piece of exactly `beside` bytes goes there (BESIDE).
    """
    if not pieces:
        layout = None
    elif len(pieces) == 1:
        layout = [0], _length(pieces[0])
    else:
        layout = payload_layout([_length(piece) for piece in pieces])
    length = layout[1] if layout is not None else 0
    alone = beside_ok and pieces is not None and len(pieces) == 1
    need = length if length <= INLINE_CEILING or (alone and length <= BESIDE_CEILING) else 0
    if alone and beside and length == beside:
        return encoded(description, BESIDE, need), []
    if layout is None or length > capacity:
        return encoded(description, NO_PAYLOAD, need), []
    return encoded(description, length, need), layout[0]


def fill_host_exchange(
    exchange: numpy.ndarray, header: numpy.ndarray, pieces: list[Piece] | None, offsets: list[int]
) -> None:
    """Write `header`, then the pieces at their offsets, into `exchange`; zero every other byte."""
    exchange[:HEADER_BYTES] = header
    used = HEADER_BYTES
    for piece, offset in zip(pieces or (), offsets, strict=False):
        start = HEADER_BYTES + offset
        exchange[used:start] = 0  # alignment
        used = start + _length(piece)
        exchange[start:used] = piece if isinstance(piece, numpy.ndarray) else piece.numpy()
    exchange[used:] = 0


def exchange_tensor(
    description: Description,
    device: torch.device,
    pieces: list[Piece] | None = None,
    capacity: int = INLINE_FLOOR,
    planned: tuple[numpy.ndarray, list[int]] | None = None,
) -> tuple[torch.Tensor, list[int]]:
    """Return what this rank sends (HEADER_BYTES, then `capacity` bytes of payload) and the offsets.

    `pieces` (`tensor_bytes`, or uint8 tensors on `device`) travel as the payload when they fit in
    `capacity` (see `plan_exchange`, or its result: `planned`).
    """
    header, offsets = plan_exchange(description, pieces, capacity) if planned is None else planned
    if device.type == "cpu":
        exchange = numpy.empty(HEADER_BYTES + capacity, dtype=numpy.uint8)
        fill_host_exchange(exchange, header, pieces, offsets)
        return torch.from_numpy(exchange), offsets
    zeros = _zeros(device, capacity)
    parts = [torch.from_numpy(header.copy()).to(device)]
    used = 0
    for piece, offset in zip(pieces or (), offsets, strict=False):
        if offset > used:  # alignment
            parts.append(zeros[: offset - used])
        parts.append(piece)
        used = offset + piece.numel()
    if used < capacity:
        parts.append(zeros[: capacity - used])
    return torch.cat(parts), offsets


def read_table(table: numpy.ndarray) -> tuple[list[list[int]], numpy.ndarray]:
    """Return every rank's header and the payloads from the exchanges gathered on the host."""
    return table[:, :HEADER_BYTES].view(numpy.int64).tolist(), table[:, HEADER_BYTES:]


def split_exchanges(gathered: torch.Tensor, world_size: int) -> tuple[list[list[int]], Payloads]:
    """Return every rank's header and the payloads (world size rows) from the gathered exchanges."""
    if gathered.device.type == "cpu":
        return read_table(gathered.numpy().reshape(world_size, -1))
    rows = gathered.view(world_size, -1)
    return rows[:, :HEADER_BYTES].view(torch.int64).tolist(), rows[:, HEADER_BYTES:]


def unpack_gathered(payloads: Payloads, offset: int, like: torch.Tensor) -> torch.Tensor:
    """Return every rank's tensor shaped like `like`, concatenated along dim 0 (a new tensor)."""
    length = like.numel() * like.element_size()
    shape = tuple(like.shape) or (1,)
    shape = (shape[0] * payloads.shape[0],) + shape[1:]
    rows = payloads[:, offset : offset + length]
    if isinstance(rows, numpy.ndarray):
        as_numpy = _NUMPY_DTYPES.get(like.dtype)
        if as_numpy is not None:  # one copy, then views: the cheapest way out
            return torch.from_numpy(rows.copy().view(as_numpy).reshape(shape))
        return torch.from_numpy(rows.copy()).view(like.dtype).reshape(shape)
    gathered = rows.contiguous().view(like.dtype).reshape(shape)
    return gathered if gathered.device == like.device else gathered.to(like.device)


def unpack_spans(
    payloads: Payloads, spans: list[tuple[int, int]], like: torch.Tensor, rows: int
) -> torch.Tensor:
    """Return each rank's span of its payload ((offset, length) in bytes, rank after rank) joined
    into one new tensor of `rows` rows shaped like `like` past dim 0 (ranks' rows may differ)."""
    shape = (rows,) + tuple(like.shape[1:])
    if isinstance(payloads, numpy.ndarray):
        joined = numpy.concatenate(
            [payloads[rank, start : start + length] for rank, (start, length) in enumerate(spans)]
        )
        as_numpy = _NUMPY_DTYPES.get(like.dtype)
        if as_numpy is not None:
            return torch.from_numpy(joined.view(as_numpy).reshape(shape))
        return torch.from_numpy(joined).view(like.dtype).reshape(shape)
    parts = [payloads[rank, start : start + length] for rank, (start, length) in enumerate(spans)]
    gathered = torch.cat(parts).view(like.dtype).reshape(shape)
    return gathered if gathered.device == like.device else gathered.to(like.device)


def unpack_beside(received: torch.Tensor, world_size: int, like: torch.Tensor) -> torch.Tensor:
    """Return every rank's tensor shaped like `like`, concatenated along dim 0, from the exchange
    beside the header's (`received`: a new uint8 tensor, viewed in place, not copied)."""
    shape = tuple(like.shape) or (1,)
    gathered = received.view(like.dtype).view((shape[0] * world_size,) + shape[1:])
    return gathered if gathered.device == like.device else gathered.to(like.device)


def unpack_one(payloads: Payloads, rank: int, offset: int, like: torch.Tensor) -> torch.Tensor:
    """Return rank `rank`'s tensor shaped like `like` (a view of the payloads)."""
    length = like.numel() * like.element_size()
    row = payloads[rank, offset : offset + length]
    if isinstance(row, numpy.ndarray):
        as_numpy = _NUMPY_DTYPES.get(like.dtype)
        if as_numpy is not None:
            return torch.from_numpy(row.view(as_numpy).reshape(like.shape))
        return torch.from_numpy(row).view(like.dtype).reshape(like.shape)
    return row.view(like.dtype).reshape(like.shape)


def unpack_rows(payloads: Payloads, offset: int, like: torch.Tensor) -> torch.Tensor:
    """Return every rank's tensor shaped like `like`, stacked along a new dim 0 (a new tensor)."""
    gathered = unpack_gathered(payloads, offset, like)
    return gathered.view((payloads.shape[0],) + tuple(like.shape))


def payload_bytes(payloads: Payloads, rank: int, length: int) -> bytes:
    """Return the first `length` bytes of rank `rank`'s payload."""
    row = payloads[rank, :length]
    return bytes(row.tobytes() if isinstance(row, numpy.ndarray) else row.cpu().numpy().tobytes())
