"""`trim_padding`: how `gather_for_metrics` drops the padding of the last batch, or refuses to."""

import collections
import dataclasses

import pytest
import torch

from accel import Accelerator
from accel.training.metrics import GatherForMetricsError, trim_padding


def test_trim_padding_keeps_the_real_rows_of_every_tensor():
    gathered = {"logits": torch.arange(12).view(6, 2), "ids": [torch.arange(6)]}
    out = trim_padding(gathered, remainder=4, expected_rows=6)
    assert out["logits"].tolist() == torch.arange(8).view(4, 2).tolist()
    assert out["ids"][0].tolist() == [0, 1, 2, 3]


def test_trim_padding_cuts_gathered_objects():
    assert trim_padding(["a", "b", "c", "pad"], remainder=3, expected_rows=4) == ["a", "b", "c"]


def test_trim_padding_refuses_input_without_one_row_per_sample():
    with pytest.raises(GatherForMetricsError, match=r"tensor of shape \(2,\) with 2 rows") as caught:
        trim_padding(torch.tensor([0.5, 0.7]), remainder=3, expected_rows=8)
    assert "3 real samples of 8" in str(caught.value)
    with pytest.raises(GatherForMetricsError, match="a list with 5 rows"):
        trim_padding(list("abcde"), remainder=3, expected_rows=8)


def test_gather_for_metrics_on_one_process_returns_every_sample():
    accelerator = Accelerator()
    loader = accelerator.prepare(torch.utils.data.DataLoader(torch.arange(10), batch_size=4))
    seen = [x for batch in loader for x in accelerator.gather_for_metrics(batch).tolist()]
    assert seen == list(range(10))


@dataclasses.dataclass
class _Outputs:
    logits: torch.Tensor
    labels: torch.Tensor


def test_dataclass_and_mapping_outputs_are_gathered_as_tensors_not_objects():
    accelerator = Accelerator()
    outputs = _Outputs(torch.ones(2, 3), torch.zeros(2))
    gathered = accelerator.gather_for_metrics(outputs)
    assert isinstance(gathered, _Outputs) and torch.equal(gathered.logits, outputs.logits)
    mapping = collections.UserDict({"logits": torch.ones(2, 3)})
    assert torch.equal(accelerator.gather_for_metrics(mapping)["logits"], mapping["logits"])


@pytest.mark.parametrize("drop_last", [False, True])
def test_gather_for_metrics_on_one_process_cuts_the_last_batch_to_its_real_samples(drop_last):
    # As Accelerate: an output made per batch (the causal LM example's loss.repeat(batch_size))
    # counts each sample of the short last batch once; per-sample outputs are unchanged.
    accelerator = Accelerator()
    loader = accelerator.prepare(
        torch.utils.data.DataLoader(torch.arange(10), batch_size=4, drop_last=drop_last)
    )
    repeated = [len(accelerator.gather_for_metrics(torch.tensor(0.5).repeat(4))) for _ in loader]
    objects = [len(accelerator.gather_for_metrics(list("abcd"), use_gather_object=True)) for _ in loader]
    scalars = [accelerator.gather_for_metrics(batch.sum()).dim() for batch in loader]
    expected = [4, 4] if drop_last else [4, 4, 2]
    assert repeated == objects == expected
    assert scalars == [0] * len(expected)  # nothing to cut in a 0-d tensor
    # Outside a loader's last batch nothing is cut.
    assert len(accelerator.gather_for_metrics(torch.zeros(4))) == 4


def test_the_default_loader_of_an_accelerator_shuffles_as_the_plain_loader():
    # Accelerate's default (use_seedable_sampler=False): cv_example's epochs match the plain loop's.
    from accel import DataLoaderConfiguration, set_seed

    assert DataLoaderConfiguration().use_seedable_sampler is False
    set_seed(7)
    plain = [[b.tolist() for b in torch.utils.data.DataLoader(torch.arange(10), batch_size=4, shuffle=True)]
             for _ in range(3)]  # fmt: skip
    set_seed(7)
    loader = Accelerator().prepare(torch.utils.data.DataLoader(torch.arange(10), batch_size=4, shuffle=True))
    assert [[b.tolist() for b in loader] for _ in range(3)] == plain
