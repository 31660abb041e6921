"""A prepared loader's position: `state_dict()` / `load_state_dict()` and resuming mid-epoch."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import DataLoader

from accel_data import LoaderStateError, prepare_data_loader, skip_first_batches
from accel_state import GradientState


def _loader(size=20, batch_size=2, num_processes=2, rank=1, **kwargs):
    return prepare_data_loader(
        DataLoader(torch.arange(size), batch_size=batch_size, shuffle=True),
        num_processes=num_processes,
        process_index=rank,
        use_seedable_sampler=True,
        data_seed=3,
        **kwargs,
    )


def _items(batches):
    return [batch.tolist() for batch in batches]


def _epochs(count, **kwargs):
    loader = _loader(**kwargs)
    return [_items(loader) for _ in range(count)]


def test_state_counts_the_batches_yielded_in_the_current_epoch():
    loader = _loader()
    assert loader.state_dict() == {"epoch": 0, "batches_yielded": 0, "global_batch_size": 4}
    batches = iter(loader)
    for count in range(1, 4):
        next(batches)
        assert loader.state_dict()["batches_yielded"] == count
    assert loader.state_dict()["epoch"] == 0
    for _ in batches:
        pass
    assert loader.state_dict() == {"epoch": 1, "batches_yielded": 0, "global_batch_size": 4}


def test_once_the_last_batch_is_yielded_the_state_is_the_next_epoch():
    loader = _loader()
    seen = []
    for _ in loader:
        seen.append(loader.state_dict())
    assert [s["batches_yielded"] for s in seen] == [1, 2, 3, 4, 0]
    assert seen[-1]["epoch"] == 1 and loader.epoch == 1
    # Resuming from there starts the next epoch whole, with no empty pass first.
    resumed = _loader()
    resumed.load_state_dict(seen[-1])
    assert _items(resumed) == _epochs(2)[1]


def test_a_pass_left_early_counts_as_done():
    loader = _loader()
    for index, _ in enumerate(loader):
        if index == 1:
            break
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batches_yielded"] == 0


@pytest.mark.parametrize("stop_after", [0, 1, 3, 4])
def test_load_state_dict_resumes_with_exactly_the_rest_of_the_epoch(stop_after):
    expected = _epochs(3)
    first = _loader()
    list(first)  # epoch 0
    batches = iter(first)
    head = [next(batches).tolist() for _ in range(stop_after)]
    state = json.loads(json.dumps(first.state_dict()))

    resumed = _loader()
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    assert len(resumed) == len(expected[1]) - stop_after
    assert resumed.skip_batches == stop_after
    rest = _items(resumed)
    assert head + rest == expected[1]
    # The skip was one-shot: the next epoch is whole.
    assert len(resumed) == 5 and resumed.skip_batches == 0
    assert _items(resumed) == expected[2]


def test_end_of_dataloader_and_remainder_on_a_resumed_pass():
    loader = _loader(size=10, batch_size=4, num_processes=2, rank=0)
    loader.load_state_dict({"epoch": 0, "batches_yielded": 1})
    gradient_state = GradientState()
    flags = [(gradient_state.end_of_dataloader, gradient_state.remainder) for _ in loader]
    assert flags == [(True, 2)]


def test_skip_first_batches_cancels_the_resume_armed_by_load_state_dict():
    expected = _epochs(2)
    loader = _loader()
    loader.load_state_dict({"epoch": 0, "batches_yielded": 3})
    loader.set_epoch(0)
    skipped = skip_first_batches(loader, 2)
    assert len(loader) == 5 and len(skipped) == 3
    assert _items(skipped) == expected[0][2:]  # skipped 2, not 2 + 3
    assert _items(loader) == expected[1]


def test_a_resume_armed_after_skip_first_batches_is_not_added_to_it():
    expected = _epochs(2)
    loader = _loader()
    skipped = skip_first_batches(loader, 2)
    loader.load_state_dict({"epoch": 0, "batches_yielded": 3})
    assert _items(skipped) == expected[0][2:]
    assert _items(loader) == expected[1]


def test_set_epoch_to_another_epoch_cancels_the_resume():
    expected = _epochs(2)
    loader = _loader()
    loader.load_state_dict({"epoch": 0, "batches_yielded": 3})
    loader.set_epoch(1)
    assert loader.state_dict()["batches_yielded"] == 0
    assert _items(loader) == expected[1]


def test_the_original_reports_the_progress_of_its_skipping_loader():
    loader = _loader()
    skipped = skip_first_batches(loader, 2)
    seen = [loader.state_dict()["batches_yielded"] for _ in skipped]
    assert seen == [3, 4, 0]
    assert loader.state_dict()["epoch"] == 1


def test_a_position_is_converted_to_another_global_batch_size():
    # 6 batches of 4 samples (one process) are 3 global batches of 8 (two processes of 4).
    single = _loader(size=40, batch_size=4, num_processes=1, rank=0)
    batches = iter(single)
    head = [next(batches).tolist() for _ in range(6)]
    state = single.state_dict()
    assert state["global_batch_size"] == 4
    ranks = [_loader(size=40, batch_size=4, num_processes=2, rank=rank) for rank in range(2)]
    rests = []
    for rank_loader in ranks:
        rank_loader.load_state_dict(state)
        assert rank_loader.skip_batches == 3
        rests.append(_items(rank_loader))
    full_order = [
        i for batch in _items(_loader(size=40, batch_size=4, num_processes=1, rank=0)) for i in batch
    ]
    combined = [i for step in zip(*rests, strict=True) for batch in step for i in batch]
    assert [i for batch in head for i in batch] + combined == full_order
    with pytest.raises(LoaderStateError, match="do not fill whole batches"):
        ranks[0].load_state_dict({"epoch": 0, "batches_yielded": 5, "global_batch_size": 4})


def test_invalid_states_are_refused():
    loader = _loader()
    with pytest.raises(LoaderStateError, match="missing key 'batches_yielded'"):
        loader.load_state_dict({"epoch": 1})
    with pytest.raises(LoaderStateError, match=">= 0"):
        loader.load_state_dict({"epoch": 1, "batches_yielded": -2})
    not_integers = [
        {"epoch": "one", "batches_yielded": 0},
        {"epoch": 0, "batches_yielded": 1, "global_batch_size": [4]},
    ]
    for bad in not_integers:
        with pytest.raises(LoaderStateError, match="must be integers"):
            loader.load_state_dict(bad)


@pytest.mark.parametrize("generator_seed", [None, 8])
@pytest.mark.parametrize("resume_by", ["load_state_dict", "restore_shuffle"])
def test_a_resumed_epoch_is_shuffled_as_the_interrupted_one_with_torchs_sampler(generator_seed, resume_by):
    # use_seedable_sampler=False (the default): the order comes from torch's generators, whose
    # states a checkpoint takes mid-epoch, after the shuffle was drawn; the loader state keeps it.
    def make():
        generator = None if generator_seed is None else torch.Generator().manual_seed(generator_seed)
        return prepare_data_loader(
            DataLoader(torch.arange(20), batch_size=2, shuffle=True, generator=generator)
        )

    torch.manual_seed(0)
    loader = make()
    list(loader)  # epoch 0
    batches = iter(loader)
    seen = [next(batches).tolist() for _ in range(3)]
    state = loader.state_dict()
    assert "shuffle" in state and state["epoch"] == 1
    rng, generator_state = torch.get_rng_state(), (loader.generator or torch.Generator()).get_state()
    rest = [batch.tolist() for batch in batches]
    after = torch.rand(2)

    torch.manual_seed(123)  # what the fresh job drew before load_state restored the random states
    resumed = make()
    torch.set_rng_state(rng)
    if resumed.generator is not None:
        resumed.generator.set_state(generator_state)
    if resume_by == "load_state_dict":
        resumed.load_state_dict(state)
        again = [batch.tolist() for batch in resumed]
    else:  # load_state's default: the epoch, the shuffle, and the caller skips
        resumed.set_epoch(state["epoch"])
        resumed.restore_shuffle(state)
        again = [batch.tolist() for batch in skip_first_batches(resumed, 3)]
    assert again == rest
    assert torch.equal(torch.rand(2), after), "the resumed run draws on as the uninterrupted one"
    assert sorted(i for batch in seen + again for i in batch) == list(range(20))
