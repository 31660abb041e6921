"""Mismatched collectives on 2 real gloo ranks, debug mode off: every rank raises CollectiveShapeError.

Without the cross-rank check these returned another rank's bytes reinterpreted, aborted a rank
inside gloo, or left the ranks out of step. Each case runs in its own job: a rank that aborted
would take the following cases down with it.
"""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

# The session runs with ACCEL_DEBUG_MODE=1 (noxfile); these jobs check the default, debug mode off.
# A short timeout turns a rank left waiting into a failure in a minute, not in half an hour.
ENV = {"ACCEL_DEBUG_MODE": "0", "ACCEL_TIMEOUT": "60"}


def _mismatched_inputs(case, rank):
    """Call the collective of `case` with inputs that differ between rank 0 and rank 1."""
    import threading

    import torch

    import accel_state as st

    first = rank == 0
    if case == "gather_same_numel":
        return st.gather(torch.ones(2, 3) if first else torch.ones(3, 2))
    if case == "gather_sizes":
        return st.gather(torch.ones(2, 5) if first else torch.ones(3, 5))
    if case == "gather_dtypes":
        return st.gather(torch.ones(2, 3) if first else torch.ones(2, 3, dtype=torch.int64))
    if case == "gather_structure":
        t = torch.ones(2)
        return st.gather({"a": t, "b": t} if first else {"a": t})
    if case == "gather_uneven_trailing_dim":
        return st.gather_uneven(torch.ones(2, 3) if first else torch.ones(4, 2))
    if case == "reduce_shapes":
        return st.reduce(torch.ones(2) if first else torch.ones(3))
    if case == "reduce_dtypes":
        return st.reduce(torch.ones(4) if first else torch.ones(4, dtype=torch.float64))
    if case == "broadcast_shapes":
        return st.broadcast(torch.arange(4.0) if first else torch.zeros(2, 2))
    if case == "broadcast_dtypes":
        return st.broadcast(torch.ones(3, dtype=torch.int32) if first else torch.zeros(3))
    if case == "broadcast_from_process":
        return st.broadcast(torch.full((2,), float(rank)), from_process=rank)
    if case == "different_collectives":
        return st.gather(torch.ones(2)) if first else st.reduce(torch.ones(2))
    if case == "pad_dim_out_of_range":
        return st.pad_across_processes(torch.ones(2, 3) if first else torch.ones(2), dim=1)
    if case == "broadcast_object_list_lengths":
        return st.broadcast_object_list([1, 2, 3] if first else [None, None])
    if case == "gather_object_unpicklable":
        return st.gather_object([threading.Lock()] if first else [1])
    raise ValueError(case)


def run_mismatched_case(case):
    """Return the CollectiveShapeError text this rank got for `case`, or what it returned instead."""
    from accel_state import CollectiveShapeError, PartialState

    rank = PartialState().process_index
    try:
        result = _mismatched_inputs(case, rank)
    except CollectiveShapeError as error:
        return str(error)
    return f"no error; returned {result!r}"


# Each case: what every rank's message must contain (both ranks' shapes, dtypes or structure).
CASES = {
    "gather_same_numel": ["gather", "rank 0: (2, 3), rank 1: (3, 2)"],
    "gather_sizes": ["gather", "rank 0: (2, 5), rank 1: (3, 5)"],
    "gather_dtypes": ["gather", "dtype", "rank 0: (2, 3) float32", "rank 1: (2, 3) int64"],
    "gather_structure": [
        "gather",
        "structure",
        "rank 0: dict{'a': (2,), 'b': (2,)}",
        "rank 1: dict{'a': (2,)}",
    ],
    "gather_uneven_trailing_dim": ["gather_uneven", "rank 0: (2, 3), rank 1: (4, 2)"],
    "reduce_shapes": ["reduce", "rank 0: (2,), rank 1: (3,)"],
    "reduce_dtypes": ["reduce", "rank 0: (4,) float32", "rank 1: (4,) float64"],
    "broadcast_shapes": ["broadcast", "rank 0: (4,), rank 1: (2, 2)"],
    "broadcast_dtypes": ["broadcast", "rank 0: (3,) int32", "rank 1: (3,) float32"],
    "broadcast_from_process": ["broadcast", "rank 0: from_process=0, rank 1: from_process=1"],
    "different_collectives": ["rank 0: gather", "rank 1: reduce"],
    "pad_dim_out_of_range": ["pad_across_processes", "rank 0: (2, 3), rank 1: (2,)"],
    "broadcast_object_list_lengths": ["broadcast_object_list", "rank 0: from_process=0, items=3", "items=2"],
    "gather_object_unpicklable": ["gather_object", "rank 0", "pickle", "lock"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mismatched_collective_raises_on_every_rank_launch(case):
    messages = run_on_ranks(run_mismatched_case, 2, case, env=ENV, timeout=240)
    for rank, message in enumerate(messages):
        for expected in CASES[case]:
            assert expected in message, f"rank {rank}: {expected!r} not in {message!r}"
    assert messages[0] == messages[1]


def gather_for_metrics_with_wrong_row_count():
    import torch
    from torch.utils.data import DataLoader

    from accel import Accelerator
    from accel_state import CollectiveShapeError

    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(torch.arange(6.0), batch_size=2))
    for batch in loader:
        # One rank hands over a row too many, as when outputs are built from the wrong batch.
        rows = batch if accelerator.process_index == 0 else torch.cat([batch, batch[:1]])
        try:
            gathered = accelerator.gather_for_metrics(rows)
        except CollectiveShapeError as error:
            return str(error)
        return f"no error; returned {gathered!r}"
    return "no batch"


def test_gather_for_metrics_with_wrong_row_count_names_each_shape_launch():
    messages = run_on_ranks(gather_for_metrics_with_wrong_row_count, 2, env=ENV, timeout=240)
    for message in messages:
        assert "gather_for_metrics" in message
        assert "rank 0: (2,), rank 1: (3,)" in message


def matching_inputs_small_and_large():
    """Matching inputs, small enough to travel with the header (1 KB a rank) and larger: exact results."""
    import torch

    import accel_state as st

    rank = st.PartialState().process_index
    results = {}
    for label, rows in (("small", 3), ("large", 3000)):
        data = {"x": torch.full((rows, 2), float(rank)), "n": (torch.tensor(rank), torch.tensor([rank > 0]))}
        gathered = st.gather(data)
        results[f"gather {label}"] = [
            gathered["x"].sum(0).tolist(),
            gathered["n"][0].tolist(),
            gathered["n"][1].tolist(),
        ]
        source = torch.arange(rows * 2, dtype=torch.int64).reshape(rows, 2) * (rank + 1)
        results[f"broadcast {label}"] = st.broadcast(source, from_process=1).sum().item()
        # Pickled, the large ones (6000 characters) no longer fit in the header's payload.
        results[f"gather_object {label}"] = [len(text) for text in st.gather_object([str(rank) * rows * 2])]
        objects = st.broadcast_object_list([str(rank) * rows * 2, rank], from_process=1)
        results[f"broadcast_object_list {label}"] = [len(objects[0]), objects[1]]
    results["gather_uneven"] = st.gather_uneven(torch.full((rank + 1, 2), rank)).tolist()
    return results


def test_matching_inputs_give_exact_results_small_and_large_launch():
    for got in run_on_ranks(matching_inputs_small_and_large, 2, env=ENV, timeout=240):
        for label, rows in (("small", 3), ("large", 3000)):
            assert got[f"gather {label}"] == [[float(rows), float(rows)], [0, 1], [False, True]]
            assert got[f"broadcast {label}"] == 2 * sum(range(rows * 2))
            assert got[f"gather_object {label}"] == [rows * 2, rows * 2]
            assert got[f"broadcast_object_list {label}"] == [rows * 2, 1]
        assert got["gather_uneven"] == [[0, 0], [1, 1], [1, 1]]


def matching_collectives_with_checks_off():
    """With ACCEL_CHECK_COLLECTIVES=0, matching inputs give the right results; padding still checks."""
    import torch

    import accel_state as st

    state = st.PartialState()
    assert not state.check_collectives  # else the plain tensors below would not take the short path
    rank = state.process_index
    gathered = st.gather(torch.full((2,), float(rank))).tolist()
    # The short path for one plain tensor: a 0-d one, one with a gradient, a transposed view.
    weight = torch.full((2,), float(rank), requires_grad=True)
    with_grad = st.gather(weight * 1)
    transposed = st.gather(torch.arange(6.0).reshape(2, 3).t() + 10 * rank)
    special = {
        "scalar": st.gather(torch.tensor(float(rank))).tolist(),
        "requires_grad": with_grad.requires_grad,
        "with_grad": with_grad.tolist(),
        "transposed": transposed.tolist(),
        "bfloat16": st.gather(torch.full((1, 2), rank, dtype=torch.bfloat16)).dtype == torch.bfloat16,
    }
    try:
        st.pad_across_processes(torch.ones(2, 3) if rank == 0 else torch.ones(2), dim=1)
    except st.CollectiveShapeError as error:
        return gathered, special, str(error)
    return gathered, special, "no error"


def test_checks_off_leaves_padding_checked_launch():
    env = {**ENV, "ACCEL_CHECK_COLLECTIVES": "0"}
    results = run_on_ranks(matching_collectives_with_checks_off, 2, env=env, timeout=240)
    columns = [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    for gathered, special, message in results:
        assert gathered == [0.0, 0.0, 1.0, 1.0]
        assert special == {
            "scalar": [0.0, 1.0],
            "requires_grad": False,
            "with_grad": [0.0, 0.0, 1.0, 1.0],
            "transposed": columns + [[v + 10 for v in row] for row in columns],
            "bfloat16": True,
        }
        assert "rank 0: (2, 3), rank 1: (2,)" in message


def mismatched_gather():
    import torch

    from accel_state import CollectiveShapeError, PartialState, gather

    rank = PartialState().process_index
    try:
        gather(torch.ones(2, 3) if rank == 0 else torch.ones(3, 2))
    except CollectiveShapeError as error:
        return str(error)
    return "no error"


def test_debug_mode_checks_even_with_checks_off_launch():
    env = {**ENV, "ACCEL_DEBUG_MODE": "1", "ACCEL_CHECK_COLLECTIVES": "0"}
    for message in run_on_ranks(mismatched_gather, 2, env=env, timeout=240):
        assert "rank 0: (2, 3), rank 1: (3, 2)" in message
