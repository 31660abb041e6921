"""DeepSpeed through accel, on 2 real CPU processes (gloo): ZeRO 0-3 against the native DDP backend.

Runs in the nox session `engines(backend='deepspeed')` (deepspeed installed, DS_ACCELERATOR=cpu);
elsewhere it skips, saying why. Several configurations share one job: starting DeepSpeed costs
seconds per process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accel_launch.testing.ranks import launch_script, run_on_ranks

pytest.importorskip(
    "deepspeed", reason="DeepSpeed is not installed: they run in the nox session engines(backend='deepspeed')"
)
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
DS_ENV = {"ACCEL_DISTRIBUTED_TYPE": "DEEPSPEED", "DS_ACCELERATOR": "cpu"}
FP32_TOLERANCE = 1e-5
BF16_TOLERANCE = 5e-2
# Measured: 0 without clipping at accumulation 1 (every stage), at most 6e-8 otherwise (the clip
# coefficient and ZeRO-2/3's per-micro-batch reduction round differently).
PLAIN_TOLERANCE = 1e-6
# Small enough that every step clips.
CLIP = 0.05
ACCUMULATION = 2


def _reset() -> None:
    from accel_state import AcceleratorState, GradientState

    AcceleratorState._reset_state()
    GradientState._reset_state()


def _data():  # noqa: ANN202 - tensors, built the same on every rank
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    return torch.utils.data.TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))


def _model():  # noqa: ANN202
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _loss(model, batch):  # noqa: ANN001, ANN202
    import torch

    x, y = batch
    dtype = next(model.parameters()).dtype  # a bf16 engine computes in bf16: feed it bf16
    return torch.nn.functional.mse_loss(model(x.to(dtype)).float(), y)


def train(
    plugin_kwargs: dict | None,
    mixed_precision: str,
    clip: float | None,
    epochs: int = 1,
    accumulation: int = ACCUMULATION,
    shuffle: bool = False,
) -> dict:
    """Train the fixed MLP (torch AdamW, batch 4 per rank); return the full weights.

    `clip` is handed to `accelerator.clip_grad_norm_` on every sync step (None: no call).
    """
    import torch

    from accel import Accelerator, DeepSpeedPlugin

    _reset()
    plugin = DeepSpeedPlugin(**plugin_kwargs) if plugin_kwargs is not None else None
    accelerator = Accelerator(
        deepspeed_plugin=plugin, mixed_precision=mixed_precision, gradient_accumulation_steps=accumulation
    )
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1) if shuffle else None
    loader = torch.utils.data.DataLoader(_data(), batch_size=4, shuffle=shuffle, generator=generator)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(epochs):
        for batch in loader:
            with accelerator.accumulate(model):
                accelerator.backward(_loss(model, batch))
                if clip is not None and accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                optimizer.zero_grad()
    return {k: v.float().tolist() for k, v in accelerator.get_state_dict(model).items()}


def train_each(configs: list[tuple]) -> list[dict]:
    """Train each configuration in turn in one job (the shared state is reset between them)."""
    return [train(*config) for config in configs]


def _max_difference(a: dict, b: dict) -> float:
    import torch

    assert a.keys() == b.keys()
    return max(float((torch.tensor(a[k]) - torch.tensor(b[k])).abs().max()) for k in a)


STAGES = [{"zero_stage": stage} for stage in (0, 1, 2, 3)]
OFFLOAD = {"zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "cpu"}


def test_zero_stages_match_the_native_backend_with_accumulation_and_clipping():
    native = run_on_ranks(train_each, 2, [(None, "no", CLIP), (None, "no", None), (None, "bf16", CLIP)])[0]
    native_clipped, native_unclipped, native_bf16 = native
    assert _max_difference(native_clipped, native_unclipped) > 1e-3, "the clip must change the run"
    configs = [(kwargs, "no", CLIP) for kwargs in [*STAGES, OFFLOAD]]
    configs += [(kwargs, "bf16", CLIP) for kwargs in STAGES]
    per_rank = run_on_ranks(train_each, 2, configs, env=DS_ENV, timeout=400)
    assert per_rank[0] == per_rank[1], "every rank must see the same consolidated weights"
    results = per_rank[0]
    for (kwargs, precision, _), weights in zip(configs, results, strict=True):
        fp32 = precision == "no"
        reference, tolerance = (native_clipped, FP32_TOLERANCE) if fp32 else (native_bf16, BF16_TOLERANCE)
        difference = _max_difference(weights, reference)
        assert difference <= tolerance, f"{kwargs} {precision}: {difference} from the native backend"


# The plain loop: every stage x accumulation 1 and 2 x clipping or not, 2 epochs of a shuffled loader.
PLAIN_EPOCHS = 2


def _plain(accumulation: int, clip: float | None, plugin_kwargs: dict | None = None) -> tuple:
    return (plugin_kwargs, "no", clip, PLAIN_EPOCHS, accumulation, True)


def test_every_zero_stage_gives_the_native_weights_in_the_plain_loop():
    runs = [(accumulation, clip) for accumulation in (1, 2) for clip in (None, CLIP)]
    native = dict(zip(runs, run_on_ranks(train_each, 2, [_plain(*run) for run in runs])[0], strict=True))
    assert _max_difference(native[(1, None)], native[(1, CLIP)]) > 1e-3, "the clip must change the run"
    assert _max_difference(native[(1, None)], native[(2, None)]) > 1e-3, "accumulation must change the run"
    configs = [(stage, *run) for stage in (0, 1, 2, 3) for run in runs]
    # Clipping asked for in the plugin, not in the loop, clips the same.
    configs += [(stage, accumulation, "plugin") for stage in (0, 3) for accumulation in (1, 2)]
    calls = [
        _plain(accumulation, None, {"zero_stage": stage, "gradient_clipping": CLIP})
        if clip == "plugin"
        else _plain(accumulation, clip, {"zero_stage": stage})
        for stage, accumulation, clip in configs
    ]
    per_rank = run_on_ranks(train_each, 2, calls, env=DS_ENV, timeout=400)
    assert per_rank[0] == per_rank[1], "every rank must see the same consolidated weights"
    differences = {}
    for (stage, accumulation, clip), weights in zip(configs, per_rank[0], strict=True):
        reference = native[(accumulation, CLIP if clip == "plugin" else clip)]
        differences[(stage, accumulation, clip)] = _max_difference(weights, reference)
    worst = {key: value for key, value in differences.items() if value > PLAIN_TOLERANCE}
    assert not worst, f"(stage, accumulation, clip) -> difference from the native backend: {worst}"
    # Without clipping or accumulation nothing is summed in another order: the weights are equal.
    assert all(differences[(stage, 1, None)] == 0.0 for stage in (0, 1, 2, 3)), differences


# Save and load into a fresh job --------------------------------------------------------------------
def save_then_continue(folder: str, stage: int) -> dict:
    """Train an epoch, save_state, train another; return the final weights (and save the model)."""
    return _save_or_resume(folder, stage, resume=False)


def resume_and_continue(folder: str, stage: int) -> dict:
    return _save_or_resume(folder, stage, resume=True)


def _save_or_resume(folder: str, stage: int, resume: bool) -> dict:
    import torch

    from accel import Accelerator, DeepSpeedPlugin

    _reset()
    plugin = DeepSpeedPlugin(zero_stage=stage)
    accelerator = Accelerator(deepspeed_plugin=plugin, gradient_accumulation_steps=2)
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loader = torch.utils.data.DataLoader(_data(), batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    def epoch() -> None:
        for batch in loader:
            with accelerator.accumulate(model):
                accelerator.backward(_loss(model, batch))
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
    return {k: v.float().tolist() for k, v in accelerator.get_state_dict(model).items()}


def test_save_state_loads_into_a_fresh_job_and_continues_identically(tmp_path):
    import torch
    from safetensors.torch import load_file

    for stage in (2, 3):
        folder = tmp_path / f"stage{stage}"
        uninterrupted = run_on_ranks(save_then_continue, 2, str(folder), stage, env=DS_ENV)[0]
        assert (folder / "deepspeed").is_dir(), sorted(p.name for p in folder.iterdir())
        resumed = run_on_ranks(resume_and_continue, 2, str(folder), stage, env=DS_ENV)[0]
        assert _max_difference(uninterrupted, resumed) == 0.0, f"stage {stage}: resume is not exact"
        saved = load_file(folder.parent / f"stage{stage}-model" / "model.safetensors")
        assert saved["0.weight"].shape == torch.Size([16, 4]), "save_model must write consolidated weights"
    # A damaged shard of the engine's own files is named before DeepSpeed unpickles anything.
    shard = next((tmp_path / "stage3" / "deepspeed").glob("*optim_states.pt"))
    with shard.open("ab") as handle:
        handle.write(b"damage")
    with pytest.raises(AssertionError, match=rf"{shard.name} is truncated or corrupt"):
        run_on_ranks(resume_and_continue, 2, str(tmp_path / "stage3"), 3, env=DS_ENV)


# The user's JSON ----------------------------------------------------------------------------------
USER_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto",
    "train_batch_size": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "torch_adam": True}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto"}},
}  # fmt: skip


def train_from_user_config(config_path: str) -> dict:
    from accel import Accelerator, DeepSpeedPlugin
    from accel.utils import DummyOptim, DummyScheduler

    _reset()
    accelerator = Accelerator(
        deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config_path), gradient_accumulation_steps=2
    )
    model = _model()
    optimizer = DummyOptim(model.parameters(), lr=0.01)
    scheduler = DummyScheduler(optimizer, warmup_num_steps=4)
    loader = torch_loader()
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    lrs = []
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(_loss(model, batch))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            lrs.append(scheduler.get_last_lr()[0])
    engine = model
    return {
        "micro": engine.train_micro_batch_size_per_gpu(),
        "accumulation": engine.gradient_accumulation_steps(),
        "train_batch_size": engine.train_batch_size(),
        "optimizer": type(engine.optimizer.optimizer).__name__,
        "lrs": lrs,
        "steps": engine.global_steps,
    }


def torch_loader():  # noqa: ANN201
    import torch

    return torch.utils.data.DataLoader(_data(), batch_size=4)


def test_a_user_json_with_auto_values_is_filled_from_prepare(tmp_path):
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps(USER_CONFIG))
    result = run_on_ranks(train_from_user_config, 2, str(config), env=DS_ENV)[0]
    assert result["micro"] == 4 and result["accumulation"] == 2 and result["train_batch_size"] == 16
    assert result["optimizer"] == "AdamW"
    assert result["steps"] == 4  # 8 batches per rank, accumulation 2
    lrs = result["lrs"][1::2]  # after each real step
    assert lrs[0] < lrs[-1] <= 0.01 + 1e-12, f"WarmupLR must warm up towards the DummyOptim's lr: {lrs}"


def test_a_conflict_between_the_json_and_the_accelerator_is_one_error_naming_both(tmp_path):
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1}}))
    script = tmp_path / "conflict.py"
    script.write_text(
        "from accel import Accelerator, DeepSpeedPlugin\n"
        f"plugin = DeepSpeedPlugin(hf_ds_config={str(config)!r})\n"
        "Accelerator(deepspeed_plugin=plugin, gradient_accumulation_steps=2)\n"
    )
    result = launch_script(script, 2, env=DS_ENV)
    assert result.returncode != 0
    assert "Accelerator(gradient_accumulation_steps=2)" in result.stderr
    assert f'{config} has "gradient_accumulation_steps": 4' in result.stderr


# DeepSpeed's own CPU Adam (compiled on first use), with the optimizer offloaded ---------------------
def train_with_deepspeed_cpu_adam() -> dict:
    """ZeRO-2, optimizer offloaded to the CPU, the config's AdamW: DeepSpeedCPUAdam, not torch's."""
    from accel import Accelerator, DeepSpeedPlugin
    from accel.utils import DummyOptim

    _reset()
    config = {
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    }
    plugin = DeepSpeedPlugin(hf_ds_config=config)
    accelerator = Accelerator(deepspeed_plugin=plugin, gradient_accumulation_steps=ACCUMULATION)
    model = _model()
    optimizer = DummyOptim(model.parameters(), lr=0.01, weight_decay=0.01)  # torch AdamW's defaults
    model, optimizer, loader = accelerator.prepare(model, optimizer, torch_loader())
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(_loss(model, batch))
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            optimizer.zero_grad()
    weights = {k: v.float().tolist() for k, v in accelerator.get_state_dict(model).items()}
    return {"weights": weights, "optimizer": type(model.optimizer.optimizer).__name__}


def test_the_deepspeed_cpu_adam_with_offload_matches_torch_adamw():
    native = run_on_ranks(train, 2, None, "no", CLIP)[0]
    result = run_on_ranks(train_with_deepspeed_cpu_adam, 2, env=DS_ENV, timeout=600)[0]
    assert result["optimizer"] == "DeepSpeedCPUAdam"
    difference = _max_difference(result["weights"], native)
    assert difference <= FP32_TOLERANCE, f"DeepSpeedCPUAdam is {difference} from torch's AdamW"


def test_accel_launch_flags_reach_an_unchanged_script(tmp_path):
    script = tmp_path / "report.py"
    script.write_text(
        "import json, torch\n"
        "from accel import Accelerator\n"
        "accelerator = Accelerator()\n"
        "model = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model, optimizer = accelerator.prepare(model, optimizer)\n"
        "accelerator.backward(model(torch.ones(2, 4)).sum())\n"
        "optimizer.step()\n"
        "accelerator.print(json.dumps({'type': accelerator.distributed_type.value,\n"
        "    'stage': model.zero_optimization_stage(), 'clip': model.gradient_clipping(),\n"
        "    'offload': str(model.zero_offload_optimizer().device),\n"
        "    'plugin_stage': accelerator.deepspeed_plugin.zero_stage}))\n"
    )
    flags = [
        "--use_deepspeed",
        "--zero_stage",
        "3",
        "--gradient_clipping",
        "0.5",
        "--offload_optimizer_device",
        "cpu",
    ]
    result = launch_script(script, 2, launch_args=flags)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"type": "DEEPSPEED", "stage": 3, "clip": 0.5, "offload": "cpu",
                      "plugin_stage": 3}  # fmt: skip


def build_under_zero3_init() -> dict:
    """Build the model inside the plugin's zero.Init context (zero3_init_flag), then train a step."""
    import torch

    from accel import Accelerator, DeepSpeedPlugin

    _reset()
    plugin = DeepSpeedPlugin(zero_stage=3, zero3_init_flag=True)
    accelerator = Accelerator(deepspeed_plugin=plugin)
    with plugin.zero3_init_context_manager():
        model = _model()
    partitioned = [p.numel() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, torch_loader())
    accelerator.backward(_loss(model, next(iter(loader))))
    optimizer.step()
    shapes = {k: list(v.shape) for k, v in accelerator.get_state_dict(model).items()}
    return {"numel_at_build": partitioned, "shapes": shapes}


def test_zero3_init_flag_builds_the_model_already_partitioned():
    result = run_on_ranks(build_under_zero3_init, 2, env=DS_ENV)[0]
    assert result["numel_at_build"] == [0, 0, 0, 0], "parameters must be partitioned as they are built"
    assert result["shapes"] == {"0.weight": [16, 4], "0.bias": [16], "2.weight": [1, 16], "2.bias": [1]}


def test_fp16_on_deepspeeds_cpu_accelerator_runs_where_it_can_else_is_one_clear_error(tmp_path):
    """DeepSpeed's CPU accelerator runs fp16 where the processor has fp16 kernels (oneDNN's, e.g.
    AVX512-FP16) and not elsewhere: the job follows what the accelerator reports."""
    from deepspeed.accelerator import get_accelerator

    script = tmp_path / "fp16.py"
    script.write_text("from accel import Accelerator\nprint('PRECISION', Accelerator().mixed_precision)\n")
    result = launch_script(script, 2, launch_args=["--use_deepspeed", "--mixed_precision", "fp16"])
    if get_accelerator().is_fp16_supported():
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.count("PRECISION fp16") == 2
        return
    assert result.returncode != 0
    assert (
        "mixed precision 'fp16' is not supported by the DeepSpeed (cpu accelerator) backend; "
        "use one of 'no', 'bf16'" in result.stderr
    )


def test_a_launch_flag_the_script_contradicts_is_one_error_naming_both(tmp_path):
    script = tmp_path / "stage3.py"
    script.write_text(
        "from accel import Accelerator, DeepSpeedPlugin\n"
        "Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3))\n"
        "print('started')\n"
    )
    result = launch_script(script, 2, launch_args=["--use_deepspeed", "--zero_stage", "2"])
    assert result.returncode != 0 and "started" not in result.stdout
    named = [
        line
        for line in result.stderr.splitlines()
        if "the script's DeepSpeedPlugin(zero_stage=3)" in line
        and "the launcher's --zero_stage (ACCEL_DEEPSPEED_ZERO_STAGE=2)" in line
    ]
    assert named, result.stderr[-3000:]


def test_deepspeeds_deprecations_are_left_out_but_the_scripts_own_warnings_shown(tmp_path):
    script = tmp_path / "warns.py"
    script.write_text(
        "import warnings, torch, torch.distributed as dist\n"
        "from accel import Accelerator, DeepSpeedPlugin\n"
        "accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3))\n"
        "model = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model, optimizer = accelerator.prepare(model, optimizer)\n"
        "accelerator.backward(model(torch.ones(2, 4)).sum())\n"  # ZeRO-3 all-gathers, reduce-scatters
        "optimizer.step()\n"
        "warnings.warn('the script is old', FutureWarning)\n"
        "dist.all_gather_into_tensor(torch.zeros(2), torch.ones(1))\n"  # a deprecated call of its own
        "accelerator.print(accelerator.distributed_type.value, model.zero_optimization_stage())\n"
    )
    result = launch_script(script, 2)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-2:] == ["DEEPSPEED", "3"], result.stdout[-2000:]
    lines = [line for line in result.stderr.splitlines() if "Warning:" in line]
    assert sum("warns.py" in line and "FutureWarning: the script is old" in line for line in lines) == 2
    # Each rank's own call warns once; DeepSpeed's many calls add nothing.
    assert sum("all_gather_into_tensor` is deprecated" in line for line in lines) == 2, lines
    assert len(lines) == 4, lines
