"""One DeepSpeed config from the script, the launcher, the user's JSON and prepare(): precedence,
"auto" values and conflicts. Pure Python: no DeepSpeed process is started here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from accel_deepspeed import DeepSpeedConfigError, DeepSpeedPlugin, DummyOptim, DummyScheduler
from accel_deepspeed.config.errors import Setting
from accel_deepspeed.config.optimizer_sections import check_optimizer, check_scheduler
from accel_deepspeed.config.resolution import fill_prepare_values, resolve_config

ACCUMULATE_2 = Setting(2, "Accelerator(gradient_accumulation_steps=2)")
BF16 = Setting("bf16", "Accelerator(mixed_precision='bf16')")


def _json(tmp_path, config):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    return path


def test_without_a_json_the_plugin_builds_zero_2_with_accumulation_and_precision():
    resolved = resolve_config(
        DeepSpeedPlugin(), accumulation=Setting(4, "Accelerator(gradient_accumulation_steps=4)"),
        mixed_precision=Setting("bf16", "Accelerator(mixed_precision='bf16')"),
    )  # fmt: skip
    config = fill_prepare_values(resolved, micro_batch_size=8, world_size=2)
    assert config["zero_optimization"]["stage"] == 2
    assert config["gradient_accumulation_steps"] == 4 == resolved.gradient_accumulation_steps
    assert config["bf16"] == {"enabled": True} and resolved.mixed_precision == "bf16"
    assert config["train_micro_batch_size_per_gpu"] == 8 and config["train_batch_size"] == 64
    assert config["gradient_clipping"] == 0.0 and not resolved.clipping_asked


@pytest.mark.parametrize(
    ("json_config", "plugin_kwargs", "env", "clip", "asked"),
    [
        (None, {}, {}, 0.0, False),  # DeepSpeed would clip to 1.0 without the key
        ({"gradient_clipping": "auto"}, {}, {}, 0.0, False),  # Accelerate fills "auto" with 1.0
        ({"gradient_clipping": "auto"}, {"gradient_clipping": 0.3}, {}, 0.3, True),
        ({"gradient_clipping": 0.7}, {}, {}, 0.7, True),
        (None, {}, {"ACCEL_GRADIENT_CLIPPING": "2.0"}, 2.0, True),
        (None, {"gradient_clipping": 0.0}, {}, 0.0, True),
    ],
)
def test_gradients_are_clipped_only_where_the_user_asks(
    tmp_path, monkeypatch, json_config, plugin_kwargs, env, clip, asked
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if json_config is not None:
        plugin_kwargs = {**plugin_kwargs, "hf_ds_config": str(_json(tmp_path, json_config))}
    resolved = resolve_config(DeepSpeedPlugin(**plugin_kwargs))
    config = fill_prepare_values(resolved, micro_batch_size=4, world_size=2)
    assert config["gradient_clipping"] == clip and resolved.clipping_asked is asked


def test_auto_values_are_filled_and_unfillable_ones_dropped(tmp_path):
    path = _json(tmp_path, {
        "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"},
    })  # fmt: skip
    plugin = DeepSpeedPlugin(hf_ds_config=str(path), gradient_clipping=1.0)
    resolved = resolve_config(plugin, accumulation=Setting(2, "Accelerator(gradient_accumulation_steps=2)"))
    config = fill_prepare_values(resolved, micro_batch_size=4, world_size=2)
    assert config["gradient_clipping"] == 1.0 and config["gradient_accumulation_steps"] == 2
    assert config["train_batch_size"] == 16 and config["bf16"]["enabled"] is False
    assert config["zero_optimization"] == {"stage": 3}  # "auto" bucket size: DeepSpeed's default
    assert plugin.stage == 3


def test_json_values_apply_where_nothing_else_sets_them(tmp_path):
    path = _json(tmp_path, {"gradient_accumulation_steps": 4, "bf16": {"enabled": True},
                            "zero_optimization": {"stage": 1}})  # fmt: skip
    resolved = resolve_config(DeepSpeedPlugin(hf_ds_config=path))
    assert resolved.gradient_accumulation_steps == 4  # the backend hands it to accumulate()
    assert resolved.mixed_precision == "bf16" and resolved.stage == 1


@pytest.mark.parametrize(
    ("json_config", "plugin_kwargs", "explicit", "named"),
    [
        ({"gradient_accumulation_steps": 4}, {}, {"accumulation": ACCUMULATE_2},
         ["Accelerator(gradient_accumulation_steps=2)", '"gradient_accumulation_steps": 4']),
        ({"zero_optimization": {"stage": 1}}, {"zero_stage": 3}, {},
         ["DeepSpeedPlugin(zero_stage=3)", '"zero_optimization.stage": 1']),
        ({"gradient_clipping": 1.0}, {"gradient_clipping": 0.5}, {},
         ["DeepSpeedPlugin(gradient_clipping=0.5)", '"gradient_clipping": 1.0']),
        ({"fp16": {"enabled": True}}, {}, {"mixed_precision": BF16},
         ["Accelerator(mixed_precision='bf16')", '"fp16.enabled": True']),
        ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}},
         {"offload_optimizer_device": "cpu"}, {},
         ["DeepSpeedPlugin(offload_optimizer_device='cpu')",
          '"zero_optimization.offload_optimizer.device": \'nvme\'']),
    ],
)  # fmt: skip
def test_a_value_set_in_two_places_differently_is_one_error_naming_both(
    tmp_path, json_config, plugin_kwargs, explicit, named
):
    path = _json(tmp_path, json_config)
    with pytest.raises(DeepSpeedConfigError) as raised:
        resolve_config(DeepSpeedPlugin(hf_ds_config=str(path), **plugin_kwargs), **explicit)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message
    for part in named:
        assert part in message


def test_equal_values_in_two_places_are_no_conflict(tmp_path):
    path = _json(tmp_path, {"gradient_accumulation_steps": 2, "zero_optimization": {"stage": 3}})
    plugin = DeepSpeedPlugin(hf_ds_config=str(path), zero_stage=3)
    resolved = resolve_config(plugin, accumulation=Setting(2, "Accelerator(gradient_accumulation_steps=2)"))
    assert resolved.stage == 3 and resolved.gradient_accumulation_steps == 2


def test_the_plugin_and_the_accelerator_disagreeing_on_accumulation_is_an_error():
    with pytest.raises(
        DeepSpeedConfigError, match=r"gradient_accumulation_steps=2\).*gradient_accumulation_steps=4\)"
    ):
        resolve_config(
            DeepSpeedPlugin(gradient_accumulation_steps=4),
            accumulation=Setting(2, "Accelerator(gradient_accumulation_steps=2)"),
        )


def test_launcher_values_fill_unset_fields_and_equal_ones_agree(monkeypatch):
    monkeypatch.setenv("ACCEL_DEEPSPEED_ZERO_STAGE", "3")
    monkeypatch.setenv("ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu")
    monkeypatch.setenv("ACCEL_GRADIENT_CLIPPING", "1.5")
    plugin = DeepSpeedPlugin()
    assert plugin.zero_stage == 3 and plugin.offload_param_device == "cpu" and plugin.gradient_clipping == 1.5
    launcher = "the launcher's --zero_stage (ACCEL_DEEPSPEED_ZERO_STAGE=3)"
    assert plugin.settings["zero_stage"].source == launcher
    same = DeepSpeedPlugin(zero_stage=3, offload_param_device="CPU", gradient_clipping=1.5)
    assert same.settings["zero_stage"].source == "the script's DeepSpeedPlugin(zero_stage=3)"


@pytest.mark.parametrize(
    ("variable", "launched", "kwargs", "named"),
    [
        ("ACCEL_DEEPSPEED_ZERO_STAGE", "2", {"zero_stage": 3},
         ["DeepSpeedPlugin(zero_stage=3)", "--zero_stage (ACCEL_DEEPSPEED_ZERO_STAGE=2)"]),
        ("ACCEL_GRADIENT_CLIPPING", "0.5", {"gradient_clipping": 1.0},
         ["DeepSpeedPlugin(gradient_clipping=1.0)", "--gradient_clipping (ACCEL_GRADIENT_CLIPPING=0.5)"]),
        ("ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu", {"offload_optimizer_device": "none"},
         ["DeepSpeedPlugin(offload_optimizer_device='none')",
          "--offload_optimizer_device (ACCEL_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=cpu)"]),
        ("ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none", {"zero_stage": 3, "offload_param_device": "cpu"},
         ["DeepSpeedPlugin(offload_param_device='cpu')",
          "--offload_param_device (ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE=none)"]),
        ("ACCEL_DEEPSPEED_ZERO3_INIT", "false", {"zero3_init_flag": True},
         ["DeepSpeedPlugin(zero3_init_flag=True)", "--zero3_init_flag (ACCEL_DEEPSPEED_ZERO3_INIT=false)"]),
        ("ACCEL_GRADIENT_ACCUMULATION_STEPS", "2", {"gradient_accumulation_steps": 4},
         ["DeepSpeedPlugin(gradient_accumulation_steps=4)",
          "--gradient_accumulation_steps (ACCEL_GRADIENT_ACCUMULATION_STEPS=2)"]),
        ("ACCEL_DEEPSPEED_CONFIG_FILE", "/elsewhere/ds.json", {"hf_ds_config": {"zero_optimization": {}}},
         ["DeepSpeedPlugin(hf_ds_config={...})", "--deepspeed_config_file"]),
    ],
)  # fmt: skip
def test_a_field_the_script_and_the_launcher_set_differently_is_one_error_naming_both(
    monkeypatch, variable, launched, kwargs, named
):
    monkeypatch.setenv(variable, launched)
    with pytest.raises(DeepSpeedConfigError) as raised:
        DeepSpeedPlugin(**kwargs)
    message = str(raised.value)
    assert "\n" not in message and "disagree" in message
    for part in named:
        assert part in message


def test_launcher_value_conflicting_with_the_json_names_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_DEEPSPEED_ZERO_STAGE", "2")
    path = _json(tmp_path, {"zero_optimization": {"stage": 3}})
    with pytest.raises(DeepSpeedConfigError, match=r"--zero_stage \(ACCEL_DEEPSPEED_ZERO_STAGE=2\)"):
        resolve_config(DeepSpeedPlugin(hf_ds_config=str(path)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"zero_stage": 5}, r"DeepSpeedPlugin\(zero_stage=5\): the ZeRO stage must be one of"),
        ({"offload_optimizer_device": "gpu"}, r"offload device must be one of none, cpu, nvme"),
        ({"gradient_accumulation_steps": 0}, r"must be a positive integer"),
        ({"gradient_clipping": -1.0}, r"must be a number >= 0"),
        ({"hf_ds_config": 3}, r"expected a path or a dict, got int"),
    ],
)
def test_bad_plugin_values_are_refused_naming_the_field(kwargs, message):
    with pytest.raises(DeepSpeedConfigError, match=message):
        DeepSpeedPlugin(**kwargs)


def test_offload_needs_the_right_stage():
    with pytest.raises(
        DeepSpeedConfigError, match="offloading parameters needs ZeRO stage 3, but the stage is 2"
    ):
        resolve_config(DeepSpeedPlugin(zero_stage=2, offload_param_device="cpu"))
    with pytest.raises(DeepSpeedConfigError, match="offloading the optimizer needs ZeRO stage 1, 2 or 3"):
        resolve_config(DeepSpeedPlugin(zero_stage=0, offload_optimizer_device="cpu"))


def test_a_broken_json_file_is_named_with_the_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"zero_optimization": {"stage": 2,}}')
    with pytest.raises(DeepSpeedConfigError, match=rf"{path}: invalid JSON at line 1, column"):
        DeepSpeedPlugin(hf_ds_config=str(path))
    with pytest.raises(DeepSpeedConfigError, match=r"missing.json: file not found"):
        DeepSpeedPlugin(hf_ds_config=str(tmp_path / "missing.json"))


def test_batch_sizes_that_contradict_the_loader_are_refused(tmp_path):
    path = _json(tmp_path, {"train_micro_batch_size_per_gpu": 16})
    resolved = resolve_config(DeepSpeedPlugin(hf_ds_config=str(path)))
    with pytest.raises(
        DeepSpeedConfigError, match=r'"train_micro_batch_size_per_gpu": 16 but .* batches of 8'
    ):
        fill_prepare_values(resolved, micro_batch_size=8, world_size=2)
    path = _json(tmp_path, {"train_batch_size": 10})
    resolved = resolve_config(DeepSpeedPlugin(hf_ds_config=str(path)))
    with pytest.raises(DeepSpeedConfigError, match=r"micro-batch 4 x accumulation 1 x 2 processes is 8"):
        fill_prepare_values(resolved, micro_batch_size=4, world_size=2)


def test_dummy_objects_fill_the_config_sections_and_mismatches_are_refused(tmp_path):
    path = _json(tmp_path, {
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto", "warmup_num_steps": "auto"}},
    })  # fmt: skip
    resolved = resolve_config(DeepSpeedPlugin(hf_ds_config=str(path)))
    optimizer = DummyOptim([], lr=0.02, weight_decay=0.1)
    check_optimizer(resolved, optimizer)
    check_scheduler(resolved, DummyScheduler(optimizer, warmup_num_steps=7), optimizer)
    assert resolved.config["optimizer"]["params"] == {"lr": 0.02, "weight_decay": 0.1}
    assert resolved.config["scheduler"]["params"]["warmup_num_steps"] == 7
    assert resolved.config["scheduler"]["params"]["warmup_max_lr"] == 0.02

    class TorchLikeOptimizer:
        pass

    with pytest.raises(
        DeepSpeedConfigError, match='defines an "optimizer" section, so prepare accel.utils.DummyOptim'
    ):
        check_optimizer(resolved, TorchLikeOptimizer())
    bare = resolve_config(DeepSpeedPlugin())
    with pytest.raises(DeepSpeedConfigError, match='has no "optimizer" section'):
        check_optimizer(bare, DummyOptim([]))


def test_importing_the_adapter_imports_no_deepspeed():
    code = "import sys, accel_deepspeed; accel_deepspeed.DeepSpeedPlugin(); print('deepspeed' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
