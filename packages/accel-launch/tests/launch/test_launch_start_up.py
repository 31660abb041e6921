"""The launcher imports torch without full collections, then freezes what it imported."""

from __future__ import annotations

import gc

import pytest

from accel_launch.launch.start_up import imports_without_collection


@pytest.fixture
def collector_restored():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_collection_is_off_inside_and_back_on_after(collector_restored):
    gc.enable()
    with imports_without_collection():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_what_the_block_made_is_frozen(collector_restored):
    gc.enable()
    frozen_before = gc.get_freeze_count()
    with imports_without_collection():
        made = [[index] for index in range(1000)]
    assert gc.get_freeze_count() >= frozen_before + len(made)


def test_a_nested_block_leaves_collection_to_the_outer_one(collector_restored):
    gc.enable()
    with imports_without_collection():
        with imports_without_collection():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collection_stays_off_when_it_was_off(collector_restored):
    gc.disable()
    with imports_without_collection():
        pass
    assert not gc.isenabled()


def test_an_error_in_the_block_still_turns_collection_back_on(collector_restored):
    gc.enable()
    with pytest.raises(ImportError), imports_without_collection():
        raise ImportError("no module named torch")
    assert gc.isenabled()
