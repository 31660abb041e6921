"""torch.compile from the Accelerator on one process: the options and their precedence, compiling
in place (the same object, the eager state dict keys), regional compilation, unwrap_model, and
checkpoints between compiled and eager models. aot_eager traces like inductor without building C++
kernels, so these tests stay quick; the inductor runs are in the integration tests."""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator
from accel.utils import DynamoBackend, TorchDynamoPlugin, compile_regions
from accel_state import AcceleratorState
from accel_state.compilation.apply import compile_kwargs, is_compiled
from accel_state.compilation.cpu_inductor import JOINT_PASS_OPTION, RANDOM_OPTION, with_cpu_options
from accel_state.compilation.plugin import CompileConfigError
from accel_state.environment import env_vars


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.down = torch.nn.LayerNorm(8), torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Stack(torch.nn.Module):
    def __init__(self, blocks: int = 3) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(4, 8)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(blocks)])
        self.out = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def _train(accelerator: Accelerator, steps: int = 4) -> tuple[list[float], torch.nn.Module]:
    torch.manual_seed(0)
    model = Stack()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses, model


def test_the_plugin_reads_the_launchers_variables_for_what_it_leaves_unset(monkeypatch):
    monkeypatch.setenv(env_vars.DYNAMO_BACKEND, "INDUCTOR")
    monkeypatch.setenv(env_vars.DYNAMO_MODE, "max-autotune")
    monkeypatch.setenv(env_vars.DYNAMO_USE_REGIONAL_COMPILATION, "true")
    plugin = TorchDynamoPlugin()
    assert plugin.backend is DynamoBackend.INDUCTOR and plugin.mode == "max-autotune"
    assert plugin.use_regional_compilation and plugin.enabled
    assert plugin.to_kwargs()["backend"] == "inductor"
    assert TorchDynamoPlugin(backend="eager", mode="default").backend is DynamoBackend.EAGER  # argument wins
    assert Accelerator(cpu=True, dynamo_backend="aot_eager").dynamo_plugin.mode == "max-autotune"


def test_no_backend_compiles_nothing():
    assert not TorchDynamoPlugin().enabled
    _, model = _train(Accelerator(cpu=True))
    assert not is_compiled(model)


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: TorchDynamoPlugin(backend="inductr"),
            r"TorchDynamoPlugin.backend is 'inductr', which is no",
        ),
        (lambda: TorchDynamoPlugin(mode="fast"), r"TorchDynamoPlugin.mode is 'fast'; torch.compile's modes"),
        (
            lambda: Accelerator(cpu=True, dynamo_backend="x"),
            r"Accelerator: dynamo_backend is 'x', which is no",
        ),
    ],
)
def test_an_unknown_backend_or_mode_is_one_line_naming_it(make, message):
    with pytest.raises(CompileConfigError, match=message):
        make()


@pytest.mark.parametrize(
    "options, mode, backend, message",
    [
        (
            {"epilogue_fusoin": False},
            None,
            "inductor",
            r"options has 'epilogue_fusoin', which is no inductor",
        ),
        (
            {"max_autotune": "yes"},
            None,
            "inductor",
            r"options\['max_autotune'\] is a str; inductor's max_autotune",
        ),
        (
            {JOINT_PASS_OPTION: "mine"},
            None,
            "inductor",
            r"options\['joint_custom_post_pass'\] is a str: inductor calls",
        ),
        ({JOINT_PASS_OPTION: [print, 3]}, None, "inductor", r"is a list: inductor calls it on each graph"),
        (
            {"x": 1},
            "max-autotune",
            "aot_eager",
            r"sets mode 'max-autotune' and options; .* backend 'aot_eager'",
        ),
    ],
)
def test_an_option_the_backend_cannot_take_is_one_line_naming_it_when_the_plugin_is_made(
    options, mode, backend, message
):
    # torch.compile would list every inductor option, or fail inside a trace at the first forward.
    with pytest.raises(CompileConfigError, match=message):
        TorchDynamoPlugin(backend=backend, mode=mode, options=options)
    plugin = TorchDynamoPlugin(backend="aot_eager")
    plugin.backend, plugin.mode, plugin.options = DynamoBackend(backend.upper()), mode, options
    accelerator, model = Accelerator(cpu=True, dynamo_plugin=plugin), Stack()
    with pytest.raises(CompileConfigError, match=message):  # a field set after: refused at prepare
        accelerator.prepare(model)
    assert accelerator._models == [] and not is_compiled(model), "refused before anything was prepared"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("backend", "inductr", r"TorchDynamoPlugin.backend is 'inductr', which is no torch.compile backend"),
        ("mode", "fastest", r"TorchDynamoPlugin.mode is 'fastest'; torch.compile's modes are"),
    ],
)
def test_a_backend_or_mode_set_after_the_plugin_was_made_is_refused_at_prepare(field, value, message):
    plugin = TorchDynamoPlugin(backend="aot_eager")
    setattr(plugin, field, value)
    accelerator, model = Accelerator(cpu=True, dynamo_plugin=plugin), Stack()
    with pytest.raises(CompileConfigError, match=message):
        accelerator.prepare(model)
    assert accelerator._models == [] and not is_compiled(model)


def test_a_mode_beside_inductors_options_adds_its_options_under_them():
    plugin = TorchDynamoPlugin(backend="inductor", mode="max-autotune", options={"epilogue_fusion": False})
    kwargs = compile_kwargs(plugin, torch.nn.Linear(2, 2))
    assert "mode" not in kwargs
    assert kwargs["options"]["max_autotune"] is True, "the mode's option"
    assert kwargs["options"]["epilogue_fusion"] is False, "the given option"
    assert TorchDynamoPlugin(backend="inductor", options={JOINT_PASS_OPTION: [print]}).options


def test_an_unknown_variable_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(env_vars.DYNAMO_BACKEND, "turbo")
    with pytest.raises(
        CompileConfigError, match=f"environment variable {env_vars.DYNAMO_BACKEND} is 'turbo'"
    ):
        TorchDynamoPlugin()


def test_both_keywords_are_refused():
    with pytest.raises(ValueError, match="dynamo_plugin or dynamo_backend, not both"):
        Accelerator(cpu=True, dynamo_backend="eager", dynamo_plugin=TorchDynamoPlugin(backend="eager"))


@pytest.mark.parametrize("regional", [False, True])
def test_a_compiled_model_trains_as_the_eager_one_and_keeps_its_keys(regional):
    from torch._dynamo.utils import counters

    eager_losses, eager = _train(Accelerator(cpu=True))
    plugin = TorchDynamoPlugin(backend="aot_eager", use_regional_compilation=regional)
    counters.clear()
    losses, model = _train(Accelerator(cpu=True, dynamo_plugin=plugin))
    assert counters["aot_autograd"]["total"] > 0, "dynamo traced the model"
    assert type(model) is type(eager), "compiled in place: prepare returns the same kind of object"
    assert is_compiled(model)
    assert losses == pytest.approx(eager_losses, rel=1e-5)
    assert list(model.state_dict()) == list(eager.state_dict()), "no _orig_mod. in the keys"
    blocks = [block._compiled_call_impl is not None for block in model.blocks]
    assert blocks == [regional] * 3
    assert (model._compiled_call_impl is not None) is not regional


def test_a_model_whose_forward_is_torchs_own_is_compiled_too():
    # Dynamo starts no trace in torch's files: an nn.Sequential compiled by Module.compile alone
    # would run eagerly.
    from torch._dynamo.utils import counters

    accelerator = Accelerator(cpu=True, dynamo_backend="aot_eager")
    model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))
    counters.clear()
    model(torch.randn(2, 4)).sum().backward()
    assert counters["aot_autograd"]["total"] > 0
    assert list(model.state_dict()) == ["0.weight", "0.bias"]


def test_regional_compilation_takes_the_blocks_given_or_the_no_split_modules():
    model = Stack()
    model._no_split_modules = ["Block"]
    compile_regions(model, backend="eager")
    assert all(block._compiled_call_impl is not None for block in model.blocks)
    assert model.inp._compiled_call_impl is None
    lone = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    compile_regions(lone, backend="eager")
    assert lone._compiled_call_impl is not None, "no repeated block: the whole model is compiled"
    with pytest.raises(CompileConfigError, match="the model has no module of class 'Decoder'"):
        compile_regions(Stack(), ["Decoder"], backend="eager")


def test_unwrap_model_returns_the_users_module_and_keeps_the_compile_when_asked():
    accelerator = Accelerator(cpu=True, dynamo_backend="aot_eager")
    _, model = _train(accelerator, steps=1)
    inner = accelerator.unwrap_model(model)
    assert type(inner) is Stack and "_orig_mod" not in str(list(inner.state_dict()))
    assert is_compiled(accelerator.unwrap_model(model, keep_torch_compile=True))


def test_a_compiled_models_checkpoint_loads_into_an_eager_one_and_back(tmp_path):
    compiled_accelerator = Accelerator(cpu=True, dynamo_backend="aot_eager")
    _, compiled = _train(compiled_accelerator)
    compiled_accelerator.save_state(tmp_path / "compiled")
    eager_accelerator = Accelerator(cpu=True)
    torch.manual_seed(5)
    eager = Stack()
    eager, _ = eager_accelerator.prepare(eager, torch.optim.AdamW(eager.parameters(), lr=1e-2))
    eager_accelerator.load_state(tmp_path / "compiled")
    for (name, a), b in zip(compiled.state_dict().items(), eager.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    eager_accelerator.save_state(tmp_path / "eager")
    compiled_accelerator.load_state(tmp_path / "eager")


def test_bf16_autocast_still_applies_inside_compiled_regions():
    # Accelerate's regional compilation dropped the autocast of mixed precision (its issue #4188).
    fp32, _ = _train(Accelerator(cpu=True), steps=2)
    AcceleratorState._reset_state()
    bf16, _ = _train(Accelerator(cpu=True, mixed_precision="bf16"), steps=2)
    plugin = TorchDynamoPlugin(backend="aot_eager", use_regional_compilation=True)
    regional, _ = _train(Accelerator(cpu=True, mixed_precision="bf16", dynamo_plugin=plugin), steps=2)
    assert abs(bf16[-1] - fp32[-1]) > 1e-3, "bf16 must change the numbers for the test to see it"
    assert regional == pytest.approx(bf16, rel=1e-6)


JOINT_PASS = "CpuJointGraphPass"


def _named(kwargs: dict) -> dict:
    """`kwargs` with the mask pass (a fresh object each call) named by its class."""
    options = {
        name: type(value).__name__ if name == JOINT_PASS_OPTION and value is not None else value
        for name, value in kwargs.get("options", {}).items()
    }
    return {**kwargs, "options": options} if "options" in kwargs else kwargs


@pytest.mark.parametrize(
    ("kwargs", "device", "expected"),
    [
        (
            {"backend": "inductor", "mode": "default"},
            "cpu",
            {"backend": "inductor", "options": {RANDOM_OPTION: True, JOINT_PASS_OPTION: JOINT_PASS}},
        ),
        ({"backend": "inductor", "mode": "default"}, "cuda", {"backend": "inductor", "mode": "default"}),
        ({"backend": "aot_eager", "mode": "default"}, "cpu", {"backend": "aot_eager", "mode": "default"}),
        (
            {"backend": "inductor", "options": {RANDOM_OPTION: False}},
            "cpu",
            {"backend": "inductor", "options": {RANDOM_OPTION: False, JOINT_PASS_OPTION: JOINT_PASS}},
        ),
        (
            {"backend": "inductor", "options": {RANDOM_OPTION: False, JOINT_PASS_OPTION: None}},
            "cpu",
            {"backend": "inductor", "options": {RANDOM_OPTION: False, JOINT_PASS_OPTION: None}},
        ),
        (
            {"backend": "inductor", "options": {"epilogue_fusion": False}},
            "cpu",
            {
                "backend": "inductor",
                "options": {"epilogue_fusion": False, RANDOM_OPTION: True, JOINT_PASS_OPTION: JOINT_PASS},
            },
        ),
        ({"backend": "inductor", "mode": "default"}, None, {"backend": "inductor", "mode": "default"}),
    ],
)
def test_inductor_on_the_cpu_gets_accels_cpu_options_unless_told_otherwise(kwargs, device, expected):
    assert _named(with_cpu_options(kwargs, device)) == expected


def test_a_mode_becomes_its_options_when_cpu_options_are_added():
    kwargs = with_cpu_options({"backend": "inductor", "mode": "max-autotune", "dynamic": None}, "cpu")
    assert "mode" not in kwargs, "torch.compile takes options or a mode, not both"
    assert kwargs["options"]["max_autotune"] is True and kwargs["options"][RANDOM_OPTION] is True


def test_a_compiled_cpu_model_with_dropout_draws_eagers_masks():
    # Inductor's own draws would give other masks for the same seed (and are slower on the CPU).
    def losses(backend: str) -> list[float]:
        AcceleratorState._reset_state()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 1))
        accelerator = Accelerator(cpu=True, dynamo_backend=backend)
        model = accelerator.prepare(model)
        x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
        return [float(model(x).square().mean()) for _ in range(3)]

    eager = losses("no")
    assert len(set(eager)) == 3, "dropout must draw new masks each call for the test to see them"
    assert losses("inductor") == pytest.approx(eager, rel=1e-6)
