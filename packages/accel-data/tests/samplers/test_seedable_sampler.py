"""`SeedableRandomSampler`: the order is a function of (seed, epoch) alone."""

from __future__ import annotations

import pytest
import torch

from accel_data import SeedableRandomSampler


def test_same_seed_and_epoch_give_the_same_permutation():
    first = list(SeedableRandomSampler(range(50), seed=3))
    assert first == list(SeedableRandomSampler(range(50), seed=3))
    assert sorted(first) == list(range(50))
    assert first != list(range(50))


def test_epoch_changes_the_order_and_is_repeatable():
    sampler = SeedableRandomSampler(range(50), seed=3)
    epoch0 = list(sampler)
    assert sampler.epoch == 1  # a finished pass advances the epoch, as Accelerate's does
    epoch1 = list(sampler)
    assert sampler.epoch == 2
    assert epoch1 != epoch0 and sorted(epoch1) == list(range(50))
    sampler.set_epoch(1)
    assert list(sampler) == epoch1
    sampler.set_epoch(0)
    assert list(sampler) == epoch0


def test_each_epoch_is_torchs_permutation_of_seed_plus_epoch():
    # Accelerate's: the generator is seeded with initial_seed + epoch, then RandomSampler draws from it.
    generator = torch.Generator()
    sampler = SeedableRandomSampler(range(10), generator=generator, data_seed=42)
    for epoch in range(3):
        expected = torch.randperm(10, generator=torch.Generator().manual_seed(42 + epoch)).tolist()
        assert list(sampler) == expected, epoch
    assert generator.initial_seed() == 44  # the sampler reseeds the generator it was given


def test_a_plain_data_loader_over_it_shuffles_anew_each_epoch():
    from torch.utils.data import DataLoader

    loader = DataLoader(range(12), batch_size=4, sampler=SeedableRandomSampler(range(12), data_seed=7))
    epochs = [[i for batch in loader for i in batch.tolist()] for _ in range(3)]
    assert epochs[0] != epochs[1] != epochs[2]
    assert epochs == [list(SeedableRandomSampler(range(12), data_seed=7 + e)) for e in range(3)]


def test_different_seeds_differ():
    assert list(SeedableRandomSampler(range(50), seed=1)) != list(SeedableRandomSampler(range(50), seed=2))


def test_iteration_does_not_touch_the_global_generator():
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    list(SeedableRandomSampler(range(10), seed=5))
    assert torch.equal(torch.rand(1), expected)


def test_replacement_draws_num_samples_indices_in_range():
    sampler = SeedableRandomSampler(range(5), seed=0, replacement=True, num_samples=40)
    drawn = list(sampler)
    assert len(sampler) == len(drawn) == 40
    assert set(drawn) <= set(range(5))
    assert len(set(drawn)) < len(drawn)


def test_num_samples_larger_than_data_repeats_whole_permutations():
    sampler = SeedableRandomSampler(range(4), seed=0, num_samples=10)
    drawn = list(sampler)
    assert len(sampler) == len(drawn) == 10
    assert sorted(drawn[:4]) == sorted(drawn[4:8]) == [0, 1, 2, 3]
    assert set(drawn[8:]) <= {0, 1, 2, 3} and len(set(drawn[8:])) == 2


def test_num_samples_smaller_than_data_is_a_prefix():
    drawn = list(SeedableRandomSampler(range(10), seed=4, num_samples=3))
    assert drawn == list(SeedableRandomSampler(range(10), seed=4))[:3]


def test_non_positive_num_samples_is_an_error():
    with pytest.raises(ValueError, match="num_samples"):
        SeedableRandomSampler(range(3), num_samples=0)


def test_accelerates_constructor_is_accepted():
    from torch.utils.data import RandomSampler

    sampler = SeedableRandomSampler(
        data_source=range(20), replacement=False, num_samples=None, generator=torch.Generator(), data_seed=7
    )
    assert isinstance(sampler, RandomSampler)
    assert sampler.initial_seed == 7 and sampler.generator is not None
    assert list(sampler) == list(SeedableRandomSampler(range(20), seed=7))
    positional = SeedableRandomSampler(range(5), True, 12, None, 7)
    assert positional.replacement and len(list(positional)) == 12


def test_without_a_seed_it_takes_torchs_initial_seed_even_with_a_generator():
    generator = torch.Generator()
    generator.manual_seed(11)
    torch.manual_seed(5)
    assert SeedableRandomSampler(range(20), generator=generator).initial_seed == 5
    assert SeedableRandomSampler(range(20)).seed == 5


def test_seed_and_data_seed_must_agree():
    with pytest.raises(ValueError, match="disagree"):
        SeedableRandomSampler(range(3), data_seed=1, seed=2)


def test_a_user_built_sampler_keeps_its_seed_when_prepared():
    from torch.utils.data import DataLoader

    from accel_data import prepare_data_loader

    sampler = SeedableRandomSampler(range(16), data_seed=3)
    loader = prepare_data_loader(DataLoader(range(16), sampler=sampler, batch_size=4), data_seed=99)
    drawn = [int(i) for batch in loader for i in batch]
    assert drawn == list(SeedableRandomSampler(range(16), data_seed=3))
