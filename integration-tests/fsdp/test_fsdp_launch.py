"""FSDP2 through accel on 2 real CPU processes (gloo), against the native DDP backend on the same data.

Several configurations share one job: each job start costs seconds.
"""

from __future__ import annotations

import json

import pytest
import torch

from accel_launch.testing.ranks import launch_script, run_on_ranks

pytestmark = pytest.mark.slow

FSDP_ENV = {"ACCEL_DISTRIBUTED_TYPE": "FSDP"}
FP32_TOLERANCE = 1e-5
BF16_TOLERANCE = 5e-2
CLIP = 0.05  # small enough that every step clips
ACCUMULATION = 2


class Block(torch.nn.Module):
    """A residual layer: the unit TRANSFORMER_BASED_WRAP shards on its own."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 16)
        self.blocks = torch.nn.ModuleList([Block(16), Block(16)])
        self.head = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _reset() -> None:
    from accel_state import AcceleratorState, GradientState

    AcceleratorState._reset_state()
    GradientState._reset_state()


def _data() -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    return torch.utils.data.TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))


def _model() -> Net:
    torch.manual_seed(0)
    return Net()


def _accelerator(plugin_kwargs: dict | None, **kwargs: object):  # noqa: ANN202
    from accel import Accelerator, FullyShardedDataParallelPlugin

    _reset()
    plugin = FullyShardedDataParallelPlugin(**plugin_kwargs) if plugin_kwargs is not None else None
    return Accelerator(fsdp_plugin=plugin, **kwargs)


def train(plugin_kwargs: dict | None, mixed_precision: str, clip: float | None) -> dict:
    """Train Net (AdamW built before prepare, accumulation 2, batch 4 per rank); return the full
    weights (main process), the losses and the clipping norms."""
    accelerator = _accelerator(
        plugin_kwargs, mixed_precision=mixed_precision, gradient_accumulation_steps=ACCUMULATION
    )
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)
    loader = torch.utils.data.DataLoader(_data(), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses, norms = [], []
    for _ in range(2):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                if clip is not None and accelerator.sync_gradients:
                    norms.append(float(accelerator.clip_grad_norm_(model.parameters(), clip)))
                optimizer.step()
                optimizer.zero_grad()
            losses.append(float(loss))
    weights = {k: v.float().tolist() for k, v in accelerator.get_state_dict(model).items()}
    return {"weights": weights, "losses": losses, "norms": norms, "type": accelerator.distributed_type.value}


def train_each(configs: list[tuple[dict | None, str, float | None]]) -> list[dict]:
    return [train(*config) for config in configs]


def _max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((torch.tensor(a[k]) - torch.tensor(b[k])).abs().max()) for k in a)


BY_SIZE = {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 100, "reshard_after_forward": False}
WRAP_BLOCKS = {"auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "transformer_cls_names_to_wrap": ["Block"]}


def test_fsdp_matches_ddp_with_accumulation_clipping_and_bf16_trains():
    natives = [(None, "no", CLIP), (None, "no", None), (None, "bf16", None)]
    native_clipped, native, native_bf16 = run_on_ranks(train_each, 2, natives)[0]
    assert native["type"] == "MULTI_CPU"
    assert _max_difference(native_clipped["weights"], native["weights"]) > 1e-3, "the clip must matter"
    configs = [
        ({}, "no", None),
        (WRAP_BLOCKS, "no", CLIP),
        (BY_SIZE, "no", None),
        ({**WRAP_BLOCKS, "activation_checkpointing": True}, "no", None),
        (WRAP_BLOCKS, "bf16", None),
    ]  # fmt: skip
    per_rank = run_on_ranks(train_each, 2, configs)
    plain, clipped, by_size, checkpointed, bf16 = per_rank[0]
    assert per_rank[1][0]["weights"] == {}, "the full state dict is gathered on the main process only"
    assert plain["type"] == "FSDP"
    for result in (plain, by_size, checkpointed):
        assert _max_difference(result["weights"], native["weights"]) <= FP32_TOLERANCE
    assert _max_difference(clipped["weights"], native_clipped["weights"]) <= FP32_TOLERANCE
    assert clipped["norms"] == pytest.approx(native_clipped["norms"], rel=1e-5)
    assert per_rank[1][1]["norms"] == clipped["norms"], "every rank sees the global norm"
    first, last = sum(bf16["losses"][:8]) / 8, sum(bf16["losses"][-8:]) / 8
    assert last < 0.8 * first, f"bf16 must train: mean loss {first} -> {last}"
    assert _max_difference(bf16["weights"], native_bf16["weights"]) <= BF16_TOLERANCE


def sharded_modules(configs: list[dict]) -> list[list[str]]:
    """Return, per plugin configuration, the names of the modules fully_shard was applied to."""
    from torch.distributed.fsdp import FSDPModule

    found = []
    for plugin_kwargs in configs:
        accelerator = _accelerator(plugin_kwargs)
        model = accelerator.prepare(_model())
        found.append([name or "<root>" for name, m in model.named_modules() if isinstance(m, FSDPModule)])
    return found


def _is_head(module: torch.nn.Module) -> bool:
    return isinstance(module, torch.nn.Linear) and module.out_features == 1


def test_an_auto_wrap_policy_shards_what_it_names():
    import functools

    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    fsdp1_style = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    configs = [
        {},
        WRAP_BLOCKS,
        {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 100},
        {"auto_wrap_policy": _is_head},
        {"auto_wrap_policy": fsdp1_style},
    ]
    found = run_on_ranks(sharded_modules, 2, configs)[0]
    assert found == [
        ["<root>"],
        ["<root>", "blocks.0", "blocks.1"],
        ["<root>", "blocks.0", "blocks.0.linear", "blocks.1", "blocks.1.linear"],
        ["<root>", "head"],
        ["<root>", "blocks.0", "blocks.1"],
    ]


def prepare_on_meta_except_main() -> dict:
    """Build the model with weights on the main process only (meta device elsewhere), prepare it with
    cpu_ram_efficient_loading, its optimizer prepared in an earlier call; train one step."""
    from accel_state import PartialState

    accelerator = _accelerator({**WRAP_BLOCKS, "cpu_ram_efficient_loading": True})
    device = "cpu" if PartialState().is_main_process else "meta"
    with torch.device(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(Net(), torch.nn.BatchNorm1d(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer = accelerator.prepare(optimizer)  # prepared before its model: re-bound when it is
    model = accelerator.prepare(model)
    start = {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}
    x, y = _data().tensors
    accelerator.backward(torch.nn.functional.mse_loss(model(x[:8]), y[:8]))
    optimizer.step()
    after = {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}
    return {"start": start, "after": after}


def test_cpu_ram_efficient_loading_fills_meta_models_from_the_main_process():
    result = run_on_ranks(prepare_on_meta_except_main, 2)[0]
    torch.manual_seed(0)
    reference = torch.nn.Sequential(Net(), torch.nn.BatchNorm1d(1)).state_dict()
    expected = {k: v.tolist() for k, v in reference.items()}
    assert _max_difference(result["start"], expected) == 0.0
    moved = torch.tensor(result["after"]["0.embed.weight"]) - reference["0.embed.weight"]
    assert float(moved.abs().max()) > 0.0, "the re-bound optimizer must step the sharded weights"


# Checkpoints ------------------------------------------------------------------------------------
def save_or_resume(folder: str, state_dict_type: str, resume: bool) -> dict:
    """Train an epoch and save_state (or load_state), then train another; return the final weights."""
    accelerator = _accelerator(
        {**WRAP_BLOCKS, "state_dict_type": state_dict_type}, gradient_accumulation_steps=2
    )
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loader = torch.utils.data.DataLoader(_data(), batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    def epoch() -> None:
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()

    if resume:
        accelerator.load_state(folder)
    else:
        epoch()
        accelerator.save_state(folder)
        accelerator.save_model(model, f"{folder}-model")
    epoch()
    return {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}


@pytest.fixture(scope="module")
def sharded_checkpoint(tmp_path_factory):  # noqa: ANN201 - (folder, the weights of the uninterrupted run)
    """One epoch of 2 processes saved with SHARDED_STATE_DICT (shared: each save costs a job)."""
    folder = tmp_path_factory.mktemp("fsdp") / "sharded"
    return folder, run_on_ranks(save_or_resume, 2, str(folder), "SHARDED_STATE_DICT", False)[0]


def test_save_state_resumes_exactly_sharded_and_full(tmp_path, sharded_checkpoint):
    from safetensors.torch import load_file

    sharded, uninterrupted = sharded_checkpoint
    full = tmp_path / "full"
    runs = {
        "SHARDED_STATE_DICT": (sharded, uninterrupted),
        "FULL_STATE_DICT": (full, run_on_ranks(save_or_resume, 2, str(full), "FULL_STATE_DICT", False)[0]),
    }
    for kind, (folder, weights) in runs.items():
        metadata = json.loads((folder / "checkpoint.json").read_text())
        assert metadata["checkpoint_format"] == (
            "fsdp-sharded" if kind.startswith("SHARDED") else "fsdp-full"
        )
        resumed = run_on_ranks(save_or_resume, 2, str(folder), kind, True)[0]
        assert _max_difference(weights, resumed) == 0.0, f"{kind}: resume is not exact"
        saved = load_file(folder.parent / f"{folder.name}-model" / "model.safetensors")
        assert saved["embed.weight"].shape == torch.Size([16, 4]), "save_model writes the full weights"
    assert (full / "model.safetensors").is_file() and (full / "optimizer_fsdp.bin").is_file()
    shards = sorted(p.name for p in (sharded / "pytorch_model_fsdp").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"], "each rank writes its own shard"
    assert (sharded / "optimizer_fsdp" / ".metadata").is_file()
    assert not (sharded / "model.safetensors").exists(), "no full state dict is gathered"


def test_a_checkpoint_loads_only_into_its_own_format(sharded_checkpoint):
    folder, _ = sharded_checkpoint
    with pytest.raises(AssertionError, match="fsdp-sharded's format"):
        run_on_ranks(save_or_resume, 2, str(folder), "FULL_STATE_DICT", True)


def load_sharded_into_this_job(folder: str) -> dict:
    """`load_state` a sharded checkpoint into this job, whatever its process count (DCP reshards);
    return the full weights, the full optimizer state's shapes and steps, and the training step."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    accelerator = _accelerator(
        {**WRAP_BLOCKS, "state_dict_type": "SHARDED_STATE_DICT"}, gradient_accumulation_steps=2
    )
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loader = torch.utils.data.DataLoader(_data(), batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    accelerator.load_state(folder)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_optimizer_state_dict(model, optimizer.optimizer, options=options).get("state", {})
    return {
        "weights": {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()},
        "exp_avg": {k: list(v["exp_avg"].shape) for k, v in state.items()},
        "steps": sorted({float(v["step"]) for v in state.values()}),
        "scheduler_epoch": scheduler.scheduler.last_epoch,
    }


def test_a_sharded_checkpoint_of_2_processes_loads_into_3(sharded_checkpoint):
    from safetensors.torch import load_file

    folder, _ = sharded_checkpoint
    loaded = run_on_ranks(load_sharded_into_this_job, 3, str(folder))[0]
    model_file = folder.parent / f"{folder.name}-model" / "model.safetensors"
    saved = {k: v.tolist() for k, v in load_file(model_file).items()}
    assert _max_difference(loaded["weights"], saved) == 0.0, "the weights must come back exactly"
    assert loaded["exp_avg"]["embed.weight"] == [16, 4], "the optimizer state is resharded whole"
    assert loaded["steps"] == [4.0], "8 batches per rank, accumulation 2: 4 optimizer steps"
    assert loaded["scheduler_epoch"] > 0, "the scheduler comes back with the model and optimizer"


# The launcher ----------------------------------------------------------------------------------
REPORT = """\
import json, torch
from torch.distributed.fsdp import FSDPModule
from accel import Accelerator
accelerator = Accelerator()
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
accelerator.backward(model(torch.ones(2, 4)).sum())
optimizer.step()
plugin = accelerator.fsdp_plugin
accelerator.print(json.dumps({"type": accelerator.distributed_type.value, "policy": plugin.auto_wrap_policy,
    "classes": plugin.transformer_cls_names_to_wrap, "state_dict_type": plugin.state_dict_type,
    "sharded": [n or "<root>" for n, m in model.named_modules() if isinstance(m, FSDPModule)]}))
"""


def test_accel_launch_use_fsdp_flags_reach_an_unchanged_script(tmp_path):
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    flags = ["--use_fsdp", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
             "--fsdp_transformer_layer_cls_to_wrap", "Linear",
             "--fsdp_state_dict_type", "FULL_STATE_DICT"]  # fmt: skip
    result = launch_script(script, 2, launch_args=flags)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"type": "FSDP", "policy": "TRANSFORMER_BASED_WRAP", "classes": ["Linear"],
                      "state_dict_type": "FULL_STATE_DICT", "sharded": ["<root>", "0", "2"]}  # fmt: skip


def test_fsdp_version_1_and_a_bad_value_are_one_line_naming_them(tmp_path):
    script = tmp_path / "plugin.py"
    script.write_text("from accel import Accelerator\nAccelerator()\n")
    result = launch_script(script, 2, launch_args=["--use_fsdp", "--fsdp_version", "1"])
    assert result.returncode != 0
    assert (
        "--fsdp_version is 1: FSDP1 (the FullyShardedDataParallel wrapper) is not supported" in result.stderr
    )
    # A value set where the launcher does not look (the script's own environment) fails in the plugin.
    code = "import os\nos.environ['ACCEL_FSDP_STATE_DICT_TYPE'] = 'LOCAL_STATE_DICT'\n"
    script.write_text(code + "from accel import Accelerator\nAccelerator()\n")
    result = launch_script(script, 2, launch_args=["--use_fsdp"])
    assert result.returncode != 0
    assert (
        "ACCEL_FSDP_STATE_DICT_TYPE=LOCAL_STATE_DICT): 'LOCAL_STATE_DICT' is not a state dict type"
        in result.stderr
    )
