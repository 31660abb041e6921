"""Collectives and process control on real gloo ranks."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def exercise_collectives():
    import torch

    from accel_state import (
        PartialState,
        broadcast,
        broadcast_object_list,
        gather,
        gather_object,
        pad_across_processes,
        reduce,
    )

    state = PartialState()
    rank, world = state.process_index, state.num_processes
    nested = {"a": torch.tensor([rank, rank]), "b": (torch.tensor([[rank * 10]]), [torch.tensor(rank)])}
    gathered = gather(nested)
    ragged = torch.full((rank + 1, 2), rank + 1)
    padded = pad_across_processes(ragged, dim=0, pad_index=-1)
    padded_first = pad_across_processes(ragged, dim=0, pad_index=-1, pad_first=True)
    wide = pad_across_processes(torch.ones(2, rank + 1), dim=1)
    with state.split_between_processes(list(range(7))) as share:
        shares = gather_object([share])
    objects = broadcast_object_list([f"from-{rank}", rank] if rank == 1 else [None, None], from_process=1)
    return {
        "rank": rank,
        "world": world,
        "distributed_type": str(state.distributed_type),
        "gather_a": gathered["a"].tolist(),
        "gather_b0": gathered["b"][0].tolist(),
        "gather_b1": gathered["b"][1][0].tolist(),
        "gather_object": gather_object([f"r{rank}"]),
        "broadcast": broadcast(torch.tensor([rank, rank + 1]), from_process=world - 1).tolist(),
        "objects": objects,
        "sum": reduce(torch.tensor([1.0, float(rank)])).tolist(),
        "mean": reduce(torch.tensor([float(rank)]), reduction="mean").tolist(),
        "padded": padded.tolist(),
        "padded_first": padded_first.tolist(),
        "wide_shape": list(wide.shape),
        "shares": shares,
    }


@pytest.mark.parametrize("num_processes", [2, 3])
def test_collectives_on_real_ranks_launch(num_processes):
    results = run_on_ranks(exercise_collectives, num_processes)
    n = num_processes
    for rank, got in enumerate(results):
        assert got["rank"] == rank and got["world"] == n
        assert got["distributed_type"] == "MULTI_CPU"
        assert got["gather_a"] == [r for r in range(n) for _ in range(2)]
        assert got["gather_b0"] == [[r * 10] for r in range(n)]
        assert got["gather_b1"] == list(range(n))
        assert got["gather_object"] == [f"r{r}" for r in range(n)]
        assert got["broadcast"] == [n - 1, n]
        assert got["objects"] == ["from-1", 1]
        assert got["sum"] == [float(n), float(sum(range(n)))]
        assert got["mean"] == [sum(range(n)) / n]
        longest = n
        assert got["padded"] == [[rank + 1] * 2] * (rank + 1) + [[-1, -1]] * (longest - rank - 1)
        assert got["padded_first"] == [[-1, -1]] * (longest - rank - 1) + [[rank + 1] * 2] * (rank + 1)
        assert got["wide_shape"] == [2, n]
        flat = [item for share in got["shares"] for item in share]
        assert flat == list(range(7))


def process_control_order(log_dir):
    import os
    import time

    from accel import Accelerator

    accelerator = Accelerator()
    log = os.path.join(log_dir, "order.log")
    with accelerator.main_process_first():
        if not accelerator.is_main_process:
            time.sleep(0.2)
        with open(log, "a") as handle:
            handle.write(f"{accelerator.process_index}\n")
    accelerator.wait_for_everyone()

    @accelerator.on_main_process
    def only_main():
        return "main"

    with open(log) as handle:
        order = [int(line) for line in handle]
    return {"order": order, "only_main": only_main(), "is_main": accelerator.is_main_process}


def test_main_process_first_and_on_main_process_launch(tmp_path):
    results = run_on_ranks(process_control_order, 3, str(tmp_path))
    for rank, got in enumerate(results):
        assert got["order"][0] == 0 and sorted(got["order"]) == [0, 1, 2]
        assert got["only_main"] == ("main" if rank == 0 else None)
        assert got["is_main"] == (rank == 0)


def copy_from_the_main_process():
    import torch

    from accel.utils import copy_tensor_to_devices
    from accel_state import PartialState

    state = PartialState()
    tensor = torch.tensor([1, 2, 3], dtype=torch.int) if state.is_main_process else None
    return copy_tensor_to_devices(tensor).tolist()


def test_copy_tensor_to_devices_gives_every_rank_the_main_process_tensor_launch():
    assert run_on_ranks(copy_from_the_main_process, 2) == [[1, 2, 3], [1, 2, 3]]


def exchange_inline_payloads():
    """Collectives whose inputs grow past the exchange's capacity, then travel inline in it."""
    import torch

    from accel_state import (
        CollectiveShapeError,
        PartialState,
        gather,
        gather_object,
        pad_across_processes,
        reduce,
    )
    from accel_state.collectives.capacity import capacity_of

    state = PartialState()
    rank, world = state.process_index, state.num_processes

    wrong, capacities = [], []
    # 16 bytes to 64 KB (the ceiling), each size twice, then 80 KB (never inline); a pad and a
    # reduce between the gathers, as in an evaluation loop.
    for elements in (4, 300, 300, 5000, 5000, 16384, 16384, 20000, 20000, 300):
        values = torch.arange(elements, dtype=torch.float32) + rank / 2
        expected = torch.cat([torch.arange(elements, dtype=torch.float32) + r / 2 for r in range(world)])
        if not torch.equal(gather(values), expected):
            wrong.append(f"gather {elements}")
        if pad_across_processes(torch.ones(rank + 1, 3), dim=0).shape != (world, 3):
            wrong.append(f"pad after {elements}")
        for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.int64):
            rows = [(torch.arange(elements % 700 + 1) * (r + 1) - r).to(dtype) for r in range(world)]
            mine = rows[rank].clone()
            for reduction, combine in (("sum", torch.add), ("max", torch.maximum), ("min", torch.minimum)):
                want = rows[0]
                for row in rows[1:]:
                    want = combine(want, row)
                got = reduce(mine, reduction=reduction)
                if got.dtype != dtype or not torch.equal(got, want):
                    wrong.append(f"reduce {reduction} {dtype} {elements}")
            mean = reduce(mine, reduction="mean", scale=2.0)
            if not torch.allclose(mean.float(), sum(r.float() for r in rows) / world * 2, rtol=1e-2):
                wrong.append(f"reduce mean {dtype} {elements}")
        if not torch.equal(mine, rows[rank]):
            wrong.append("reduce changed its input")
        capacities.append(capacity_of(state.communicator).bytes)
    # Inputs whose bytes are not one run: a strided slice, an expand, a transpose (one rank's alone
    # would otherwise fail before the exchange and leave the others waiting).
    views = {
        "slice": lambda t: t[:, ::2],
        "expand": lambda t: t[:1].expand(3, 6),
        "transpose": lambda t: t.t(),
    }
    for name, view_of in views.items():
        per_rank = [view_of(torch.arange(24, dtype=torch.float32).reshape(4, 6) + r) for r in range(world)]
        for _ in range(2):  # the second call travels inline once the capacity learnt its size
            if not torch.equal(gather(per_rank[rank]), torch.cat(per_rank)):
                wrong.append(f"gather of a {name}")
            if not torch.equal(reduce(per_rank[rank], reduction="max"), per_rank[-1]):
                wrong.append(f"reduce of a {name}")
    objects = [gather_object([list(range(rank, rank + 2000))]) for _ in range(3)]  # ~10 KB pickled
    if any(o != [list(range(r, r + 2000)) for r in range(world)] for o in objects):
        wrong.append("gather_object")
    # A mismatch after the capacity grew still raises on every rank, and the job goes on.
    try:
        gather(torch.ones(16384 - rank))
        mismatch = ""
    except CollectiveShapeError as error:
        mismatch = str(error)
    after = gather(torch.tensor([rank])).tolist()
    return {"wrong": wrong, "capacities": capacities, "mismatch": mismatch, "after": after}


@pytest.mark.parametrize("num_processes", [2, 3])
def test_inputs_travel_inline_once_the_capacity_grew_and_every_rank_agrees_on_it_launch(num_processes):
    results = run_on_ranks(exchange_inline_payloads, num_processes)
    for got in results:
        assert got["wrong"] == []
        assert got["mismatch"].startswith("gather: tensors differ in shape across ranks")
        assert got["after"] == list(range(num_processes))
    assert len({tuple(got["capacities"]) for got in results}) == 1  # the same on every rank
    assert 65536 in results[0]["capacities"]  # 64 KB gathers travelled inline


def gather_beside_the_check():
    """Gathers of one 256 KB tensor per call: from the third on, the data travels beside the check's
    exchange; a call that breaks the pattern, a mismatch and other dtypes in between, and a mismatch
    where only some ranks' gathers are of the foreseen size."""
    import torch

    from accel_state import CollectiveShapeError, PartialState, gather, reduce
    from accel_state.collectives.capacity import capacity_of

    state = PartialState()
    rank, world = state.process_index, state.num_processes
    capacity = capacity_of(state.communicator)
    wrong, besides = [], []

    def check(values, label):
        def of(r):  # rank r's input
            return values ^ bool(r % 2) if values.dtype == torch.bool else values + r

        got = gather(of(rank))
        if got.dtype != values.dtype or not torch.equal(got, torch.cat([of(r) for r in range(world)])):
            wrong.append(label)

    rows = torch.arange(2**16, dtype=torch.float32).reshape(2**12, 16)  # 256 KB
    for step in range(8):
        besides.append(capacity.beside)
        check(rows * (step + 1), f"gather {step}")
    besides.append(capacity.beside)
    check(rows[:-1], "a gather of another size")  # sends nothing beside, gathers as ever
    if reduce(torch.tensor([float(rank)]), reduction="sum").item() != sum(range(world)):
        wrong.append("reduce")
    for dtype in (torch.bfloat16, torch.int64, torch.bool):
        values = rows.to(dtype) if dtype != torch.bool else rows % 3 > 0
        for repeat in range(6):
            check(values, f"gather {dtype} {repeat}")
    try:  # the same bytes on every rank, but another shape on rank 1: refused, not reinterpreted
        gather(rows if rank != 1 else rows.reshape(16, 2**12))
        mismatch = ""
    except CollectiveShapeError as error:
        mismatch = str(error)
    check(rows, "a gather after the mismatch")
    check(rows, "a gather foreseen again")
    split = ""
    try:  # only rank 0's gather is of the foreseen size: the others join its exchange, all raise
        besides.append(capacity.beside)
        gather(rows if rank == 0 else rows[:-1])
    except CollectiveShapeError as error:
        split = str(error)
    check(rows, "a gather after the split")
    return {"wrong": wrong, "besides": besides, "mismatch": mismatch, "split": split}


@pytest.mark.parametrize("num_processes", [2, 3])
def test_a_repeated_gather_travels_beside_the_check_and_stays_exact_launch(num_processes):
    results = run_on_ranks(gather_beside_the_check, num_processes)
    for got in results:
        assert got["wrong"] == []
        assert got["mismatch"].startswith("gather: tensors differ in shape across ranks")
        assert got["split"].startswith("gather: tensors differ in shape across ranks")
    assert len({tuple(got["besides"]) for got in results}) == 1  # the same on every rank
    # Nothing foreseen until a 256 KB gather had followed a gather, then 256 KB beside each, and at
    # the split (rank 0 sent its tensor beside, the others joined with zeros).
    assert results[0]["besides"] == [0] * 2 + [2**18] * 7 + [2**18]


def uneven_gathers_inline():
    """gather_uneven (gather_for_metrics outside a padded loader): each rank brings its own number
    of rows; once the exchange's capacity fits them, they travel in the check's exchange and no
    second all_gather runs."""
    import torch

    import accel_state.collectives.operations as operations
    from accel_state import CollectiveShapeError, PartialState, gather_uneven

    state = PartialState()
    rank, world = state.process_index, state.num_processes
    second_gathers = []
    plain = operations._gather_one

    def counted(tensor):
        second_gathers.append(tuple(tensor.shape))
        return plain(tensor)

    operations._gather_one = counted
    wrong, inline = [], []

    def check(make, label, repeats=3):
        expected = _concatenated([make(r) for r in range(world)])
        kept = None
        for repeat in range(repeats):
            before = len(second_gathers)
            got = gather_uneven(make(rank))
            inline.append((label, repeat, len(second_gathers) == before))
            if not _equal(got, expected):
                wrong.append(f"{label} #{repeat}")
            kept = got if kept is None else kept
        if not _equal(kept, expected):  # results own their memory: the exchange's buffers are reused
            wrong.append(f"{label}: an earlier result changed")

    check(lambda r: torch.arange(5 * (r + 1), dtype=torch.float32).reshape(r + 1, 5) + r, "rows r+1")
    check(lambda r: torch.ones(0 if r == 0 else 2 * r, 3) * r, "no rows on rank 0")
    check(
        lambda r: {
            "a": torch.full((r + 1, 3), float(r)),
            "b": [torch.arange(2 * r, dtype=torch.int64), torch.tensor(float(r), dtype=torch.bfloat16)],
        },
        "nested, int64 and a 0-d bf16",
    )
    check(lambda r: torch.arange(7 * (r + 2)).reshape(7, r + 2).t() % 3 == 0, "a transposed bool")
    check(lambda r: torch.randn(r + 1, 6, generator=torch.Generator().manual_seed(r)).bfloat16(), "bf16")
    check(lambda r: torch.full((5000 + r, 4), float(r)), "80 KB and more (never inline)", repeats=2)
    try:
        gather_uneven(torch.ones(2, 3 + rank))
        mismatch = ""
    except CollectiveShapeError as error:
        mismatch = str(error)
    check(lambda r: torch.full((r + 1,), float(r)), "after the mismatch")
    operations._gather_one = plain
    return {"wrong": wrong, "inline": inline, "mismatch": mismatch}


def _concatenated(per_rank):
    import torch

    if isinstance(per_rank[0], dict):
        return {
            "a": _concatenated([p["a"] for p in per_rank]),
            "b": [_concatenated([p["b"][i] for p in per_rank]) for i in range(2)],
        }
    return torch.cat([t if t.ndim else t.unsqueeze(0) for t in per_rank])


def _equal(got, want):
    import torch

    if isinstance(want, dict):
        return _equal(got["a"], want["a"]) and all(
            _equal(g, w) for g, w in zip(got["b"], want["b"], strict=True)
        )
    return got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("num_processes", [2, 3])
def test_uneven_gathers_travel_in_the_check_exchange_once_it_fits_them_launch(num_processes):
    results = run_on_ranks(uneven_gathers_inline, num_processes)
    for got in results:
        assert got["wrong"] == []
        assert got["mismatch"].startswith("gather_uneven: tensors differ in shape across ranks")
    assert len({tuple(got["inline"]) for got in results}) == 1  # the same on every rank
    travelled = {(label, repeat): inline for label, repeat, inline in results[0]["inline"]}
    # From the second call of a kind on, what fits in 64 KB travels inline; 80 KB never does.
    assert all(travelled[label, repeat] for label, repeat in travelled if repeat > 0 and "80 KB" not in label)
    assert not any(travelled[label, repeat] for label, repeat in travelled if "80 KB" in label)
