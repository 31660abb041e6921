"""Tensor parallel plans: found on the model as transformers lays them out, or given; every pattern
must match a module and every style must be known, else one line naming it."""

from __future__ import annotations

import types

import pytest
import torch

from accel_state.parallelism.config import ParallelismConfigError
from accel_state.parallelism.tensor_parallel import plan_of, resolve


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)


class Base(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(), Layer()])


class CausalLM(torch.nn.Module):
    base_model_prefix = "model"

    def __init__(self) -> None:
        super().__init__()
        self.model = Base()
        self.lm_head = torch.nn.Linear(4, 10)
        self.config = types.SimpleNamespace(
            base_model_tp_plan={"layers.*.up": "colwise", "layers.*.down": "rowwise"}
        )


def test_a_given_plan_wins_and_patterns_match_one_name_per_star():
    model = CausalLM()
    plan, source = plan_of(model, {"model.layers.*.up": "colwise"})
    assert source == "TorchTensorParallelConfig(tp_plan=...)"
    assert resolve(model, plan, source) == {"model.layers.0.up": "colwise", "model.layers.1.up": "colwise"}


def test_the_base_models_plan_is_read_under_its_prefix():
    model = CausalLM()
    plan, source = plan_of(model, None)
    assert source == "CausalLM.config.base_model_tp_plan"
    assert resolve(model, plan, source) == {
        "model.layers.0.up": "colwise",
        "model.layers.1.up": "colwise",
        "model.layers.0.down": "rowwise",
        "model.layers.1.down": "rowwise",
    }
    model._tp_plan = {"lm_head": "colwise_gather_output", "model.layers.*.up": "colwise"}
    plan, source = plan_of(model, None)
    assert source == "CausalLM._tp_plan"
    assert resolve(model, plan, source)["lm_head"] == "colwise_gather_output"  # transformers' own style names


def test_a_model_without_a_plan_is_told_how_to_give_one():
    with pytest.raises(
        ParallelismConfigError, match=r"^tp_size > 1 but Layer has no tensor parallel plan .*tp_plan="
    ):
        plan_of(Layer(), None)


def test_a_pattern_matching_nothing_or_an_unknown_style_is_named():
    model = CausalLM()
    with pytest.raises(ParallelismConfigError) as caught:
        resolve(model, {"model.layers.*.gate": "colwise"}, "the plan")
    assert str(caught.value) == "the plan: pattern 'model.layers.*.gate' matches no module of CausalLM"
    with pytest.raises(
        ParallelismConfigError,
        match=r"^the plan: style 'columnwise' of 'lm_head' is not one accel applies \(known: colwise, ",
    ):
        resolve(model, {"lm_head": "columnwise"}, "the plan")
    with pytest.raises(ParallelismConfigError, match="matches no module"):
        resolve(model, {"layers.*.up": "colwise"}, "the plan")  # `*` stands for one name, not a prefix
