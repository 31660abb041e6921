"""`accel estimate-memory`: exact numbers for known models, one-line errors, and the AdamW estimate
checked against the memory a real training step takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from accel_launch.commands.cli import accel

FACTORY = """
from torch import nn

def make():
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))

def not_a_model():
    return 3

def broken():
    raise RuntimeError("no weights today")
"""
PARAMETERS = 10 * 20 + 20 + 20 * 5 + 5  # 325; the largest layer is "0" with 220


@pytest.fixture
def factory(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(FACTORY)
    return path


def estimate(*args: str) -> dict:
    result = CliRunner().invoke(accel, ["estimate-memory", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_factory_file_gives_exact_counts_sizes_and_training_estimates(factory):
    report = estimate(f"{factory}:make", "--dtypes", "float32", "bfloat16", "int4", "--num_processes", "2")
    assert report["parameters"] == PARAMETERS
    assert report["largest_layer"] == {"name": "0", "elements": 220}
    assert list(report["dtypes"]) == ["float32", "bfloat16", "int4"]
    fp32, bf16, int4 = (report["dtypes"][name] for name in ("float32", "bfloat16", "int4"))
    assert (fp32["total_bytes"], fp32["largest_layer_bytes"]) == (1300, 880)
    # 16 bytes of AdamW state per parameter, 4 of step workspace.
    assert (fp32["adamw_state_bytes"], fp32["training_peak_bytes"]) == (16 * 325, 20 * 325)
    # Sharded over 2: half of it, plus the largest layer's weights and gradients gathered in fp32.
    assert fp32["training_per_process_bytes"] == 20 * 325 // 2 + 220 * 2 * 4
    assert (bf16["total_bytes"], bf16["training_peak_bytes"]) == (650, 22 * 325)
    assert int4["total_bytes"] == 163 and int4["training_peak_bytes"] is None


def test_a_module_factory_and_the_table(tmp_path, monkeypatch, factory):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(accel, ["estimate-memory", "--dtypes", "float32", "int8", "models:make"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "325 parameters" in lines[0] and "largest layer 0 (220 elements)" in lines[0]
    assert lines[1].split()[:3] == ["dtype", "total", "size"]
    assert lines[3].split() == ["float32", "1.27", "KiB", "880", "B", "5.08", "KiB", "6.35", "KiB"]
    assert lines[4].split() == ["int8", "325", "B", "220", "B", "-", "-"]


def test_a_transformers_config_counts_the_real_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=64, n_layer=3, n_head=4, vocab_size=500, n_positions=32)
    config.architectures = ["GPT2LMHeadModel"]
    real = transformers.GPT2LMHeadModel(config)  # tied embeddings: counted once
    config.save_pretrained(tmp_path)
    report = estimate(str(tmp_path), "--dtypes", "float16")
    assert report["parameters"] == sum(p.numel() for p in real.parameters())
    # GPT-2 names its block unsplittable: the largest layer is the embedding or a whole block.
    block = sum(p.numel() for p in real.transformer.h[0].parameters())
    assert report["largest_layer"]["elements"] == max(block, real.transformer.wte.weight.numel())


@pytest.mark.parametrize(
    ("model", "dtypes", "names"),
    [
        ("{factory}:nothing_here", [], ["models.py:nothing_here", "no 'nothing_here'"]),
        ("{factory}:not_a_model", [], ["not_a_model", "not a torch.nn.Module"]),
        ("{factory}:broken", [], ["broken", "RuntimeError: no weights today"]),
        ("no_such_module_anywhere:make", [], ["no_such_module_anywhere", "does not import"]),
        ("{tmp}/missing.py:make", [], ["missing.py", "no such Python file"]),
        ("{tmp}/nowhere", [], ["nowhere", "not a config folder"]),
        ("{tmp}", [], ["config.json", "no such config file"]),
        ("{factory}:make", ["--dtypes", "float8"], ["unknown dtype 'float8'"]),
    ],
)
def test_bad_input_is_one_line_naming_it(tmp_path, factory, model, dtypes, names):
    spec = model.format(factory=factory, tmp=tmp_path)
    result = CliRunner().invoke(accel, ["estimate-memory", spec, *dtypes])
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1 and result.output.startswith("accel: "), result.output
    for name in names:
        assert name in result.output


def test_an_unreadable_config_is_named(tmp_path):
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    result = CliRunner().invoke(accel, ["estimate-memory", str(tmp_path)])
    assert result.exit_code == 2 and "config.json: not a transformers config" in result.output


def test_without_transformers_a_config_says_which_package_is_missing(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    result = CliRunner().invoke(accel, ["estimate-memory", str(tmp_path)])
    assert result.exit_code == 2
    assert "needs the transformers package" in result.output and len(result.output.splitlines()) == 1


# One AdamW step of a 48 MiB MLP (12.6M parameters) in a fresh process; the growth of its resident
# memory from before the model is built to the peak is compared with the estimate. A tiny step first
# keeps the libraries' one-off start-up (thread pools, kernels) out of the measurement.
TRAIN_ONE_STEP = textwrap.dedent(
    """
    import json, torch
    torch.manual_seed(0)

    def status(key):
        with open("/proc/self/status") as lines:
            return next(int(l.split()[1]) * 1024 for l in lines if l.startswith(key + ":"))

    def make():
        return torch.nn.Sequential(*(torch.nn.Linear(2048, 2048) for _ in range(3)))

    warm = torch.nn.Linear(64, 64)
    warm(torch.randn(2, 64)).sum().backward()
    torch.optim.AdamW(warm.parameters()).step()
    before = status("VmRSS")
    model = make()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 2048)).square().mean().backward()
    optimizer.step()
    print(json.dumps({"growth": status("VmHWM") - before}))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_training_estimate_matches_a_measured_adamw_step(tmp_path):
    # The factory the estimate builds is the script's own `make`.
    (tmp_path / "mlp.py").write_text(TRAIN_ONE_STEP.split("warm = ")[0])
    measured = subprocess.run(
        [sys.executable, "-c", TRAIN_ONE_STEP],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert measured.returncode == 0, measured.stderr
    growth = json.loads(measured.stdout.splitlines()[-1])["growth"]
    report = estimate(f"{tmp_path / 'mlp.py'}:make", "--dtypes", "float32")
    assert report["parameters"] == 3 * (2048 * 2048 + 2048)
    predicted = report["dtypes"]["float32"]["training_peak_bytes"]
    assert 0.75 * predicted <= growth <= 1.25 * predicted, (growth / 2**20, predicted / 2**20)
