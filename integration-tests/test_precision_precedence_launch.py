"""Mixed precision comes from the Accelerator argument, else the launcher (flag or config file)."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import launch_script

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
import torch
from accel import Accelerator

requested = None if sys.argv[1] == "none" else sys.argv[1]
accelerator = Accelerator(mixed_precision=requested)
model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(2, 2)))
seen = []
model[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
model(torch.ones(1, 2))
print(f"MODE {accelerator.mixed_precision} {seen[0]}", flush=True)
"""


def _mode(tmp_path, argument, launch_args):
    script = tmp_path / "mode.py"
    script.write_text(SCRIPT)
    result = launch_script(script, 1, [argument], launch_args=launch_args, timeout=120)
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith("MODE "))


def test_config_file_then_flag_then_argument_launch(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("mixed_precision: bf16\n")
    from_file = ["--config_file", str(config)]
    assert _mode(tmp_path, "none", from_file) == "MODE bf16 torch.bfloat16"
    assert _mode(tmp_path, "none", [*from_file, "--mixed_precision", "fp16"]) == "MODE fp16 torch.float16"
    assert _mode(tmp_path, "no", [*from_file, "--mixed_precision", "fp16"]) == "MODE no torch.float32"
