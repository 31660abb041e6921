"""An `Accelerator` on XLA's CPU device: placement, the basic loop, loaders, collectives, checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import torch_xla
from torch.utils.data import DataLoader, TensorDataset
from torch_xla.distributed.parallel_loader import MpDeviceLoader

from accel import Accelerator, DistributedType, set_seed
from accel_xla import RecompilationWarning, XlaConfigError

WEIGHTS = torch.tensor([1.0, -2.0, 3.0, 0.5])


def _regression(samples: int = 64, batch_size: int = 8) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(samples, 4, generator=generator)
    targets = (inputs @ WEIGHTS + 0.1).unsqueeze(1)
    return DataLoader(TensorDataset(inputs, targets), batch_size=batch_size)


class TiedLanguageModel(torch.nn.Module):
    """A decoder that shares its embedding matrix (as GPT-2's and T5's do)."""

    def __init__(self, vocabulary: int = 11, width: int = 8) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(vocabulary, width)
        self.hidden = torch.nn.Linear(width, width)
        self.decoder = torch.nn.Linear(width, vocabulary, bias=False)
        self.decoder.weight = self.embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.tanh(self.hidden(self.embedding(tokens))))


def _train(accelerator: Accelerator, model, optimizer, loader, epochs: int = 1) -> list[float]:
    losses = []
    for _ in range(epochs):
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    return losses


def test_the_run_is_xla_on_the_xla_device():
    accelerator = Accelerator()
    assert accelerator.distributed_type is DistributedType.XLA
    assert accelerator.device.type == "xla"
    assert accelerator.device == torch_xla.device()
    assert (accelerator.num_processes, accelerator.process_index) == (1, 0)
    assert accelerator.is_main_process


def test_cpu_true_runs_on_the_native_backend_even_with_an_xla_device():
    accelerator = Accelerator(cpu=True)
    assert accelerator.distributed_type is DistributedType.NO
    assert accelerator.device == torch.device("cpu")


def test_the_basic_loop_trains_and_its_loss_falls():
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _regression())
    losses = _train(accelerator, model, optimizer, loader, epochs=3)
    assert losses[-1] < losses[0] / 100


def test_prepare_moves_the_model_and_rebinds_the_optimizer():
    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)  # built on the host parameters
    model, optimizer = accelerator.prepare(model, optimizer)
    parameters = list(model.parameters())
    assert all(p.device.type == "xla" for p in parameters)
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in parameters]
    before = [p.detach().cpu().clone() for p in parameters]
    loss = model(torch.ones(2, 4, device=accelerator.device)).sum()
    accelerator.backward(loss)
    optimizer.step()
    assert all(not torch.equal(b, p.detach().cpu()) for b, p in zip(before, parameters, strict=True))


def test_an_optimizer_prepared_after_its_model_is_rebound_too():
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(optimizer)
    assert optimizer.param_groups[0]["params"][0] is model.weight


def test_tied_weights_stay_tied_through_prepare_and_training():
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = TiedLanguageModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert model.decoder.weight is model.embedding.weight
    assert model.embedding.weight.device.type == "xla"
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters())) == 3
    tokens = torch.arange(8, device=accelerator.device) % 11
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(tokens), tokens)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert model.decoder.weight is model.embedding.weight


def test_prepared_loaders_upload_batches_to_the_xla_device():
    accelerator = Accelerator()
    loader = accelerator.prepare(_regression(samples=20, batch_size=8))
    assert isinstance(loader, MpDeviceLoader)
    assert len(loader) == 3
    assert loader.total_batch_size == 8
    ends = []
    shapes = []
    for inputs, targets in loader:
        assert inputs.device.type == "xla" and targets.device.type == "xla"
        shapes.append(tuple(inputs.shape))
        ends.append(accelerator.gradient_state.end_of_dataloader)
    assert shapes == [(8, 4), (8, 4), (4, 4)]
    assert ends == [False, False, True]  # the loop's own end of data, not the upload thread's
    loader.set_epoch(3)
    assert loader.state_dict()["epoch"] == 3


class CountedLoads(torch.utils.data.Dataset):
    """Item i is tensor([i]); remembers which items were loaded."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        self.loaded.append(index)
        return torch.tensor([float(index)])


def test_skip_first_batches_skips_inside_the_device_loader_without_loading_the_skipped():
    accelerator = Accelerator()
    dataset = CountedLoads(20)
    loader = accelerator.prepare(DataLoader(dataset, batch_size=3))
    full = [batch.cpu().flatten().tolist() for batch in loader]
    dataset.loaded.clear()
    skipped = accelerator.skip_first_batches(loader, 2)
    assert isinstance(skipped, MpDeviceLoader)
    assert len(skipped) == 5
    rest, ends = [], []
    for batch in skipped:
        assert batch.device.type == "xla"
        rest.append(batch.cpu().flatten().tolist())
        ends.append(accelerator.gradient_state.end_of_dataloader)
    assert rest == full[2:]
    assert ends == [False, False, False, False, True]
    assert sorted(dataset.loaded) == list(range(6, 20))  # the skipped batches were never loaded
    assert [batch.cpu().flatten().tolist() for batch in loader] == full  # then whole epochs again


def test_accumulation_steps_every_second_batch():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _regression(samples=48))
    syncs = []
    for inputs, targets in loader:
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(inputs), targets))
            optimizer.step()
            optimizer.zero_grad()
            syncs.append(accelerator.sync_gradients)
    assert syncs == [False, True] * 3


def test_gather_reduce_and_pad_on_one_replica():
    accelerator = Accelerator()
    tensor = torch.arange(6.0, device=accelerator.device).reshape(3, 2)
    gathered = accelerator.gather({"x": tensor})
    assert gathered["x"].device.type == "xla"
    assert torch.equal(gathered["x"].cpu(), tensor.cpu())
    assert torch.equal(accelerator.reduce(tensor, "mean").cpu(), tensor.cpu())
    assert torch.equal(accelerator.pad_across_processes(tensor, dim=1).cpu(), tensor.cpu())
    assert accelerator.gather_for_metrics(tensor).shape == (3, 2)
    accelerator.wait_for_everyone()


def test_clip_grad_norm_returns_the_norm_before_clipping():
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward((model(torch.ones(3, 4, device=accelerator.device)) * 100).sum())
    norm = accelerator.clip_grad_norm_(model.parameters(), 1.0)
    assert norm.item() > 1.0
    total = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert total.item() == pytest.approx(1.0, rel=1e-3)
    optimizer.step()


def test_save_writes_host_tensors(tmp_path):
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(4, 1))
    accelerator.save(model.state_dict(), tmp_path / "weights.pt")
    loaded = torch.load(tmp_path / "weights.pt", weights_only=True)
    assert {t.device.type for t in loaded.values()} == {"cpu"}
    assert torch.equal(loaded["weight"], model.weight.detach().cpu())


def test_save_state_and_load_state_round_trip(tmp_path):
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = TiedLanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    tokens = torch.arange(8, device=accelerator.device) % 11
    for _ in range(2):
        accelerator.backward(torch.nn.functional.cross_entropy(model(tokens), tokens))
        optimizer.step()
        optimizer.zero_grad()
    saved = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    saved_moments = optimizer.state_dict()["state"][0]["exp_avg"].cpu().clone()
    folder = accelerator.save_state(str(tmp_path / "checkpoint"))
    optimizer_file = torch.load(tmp_path / "checkpoint" / "optimizer.bin", weights_only=True)
    assert optimizer_file["state"][0]["exp_avg"].device.type == "cpu"
    for _ in range(2):  # move away from the checkpoint
        accelerator.backward(torch.nn.functional.cross_entropy(model(tokens), tokens))
        optimizer.step()
        optimizer.zero_grad()
    assert not torch.equal(model.embedding.weight.detach().cpu(), saved["embedding.weight"])
    accelerator.load_state(folder)
    for name, value in model.state_dict().items():
        assert value.device.type == "xla"
        assert torch.equal(value.cpu(), saved[name]), name
    assert model.decoder.weight is model.embedding.weight
    moments = optimizer.state_dict()["state"][0]["exp_avg"]
    assert moments.device.type == "xla"
    assert torch.equal(moments.cpu(), saved_moments)


def test_bf16_runs_the_forward_in_bfloat16_and_returns_fp32():
    accelerator = Accelerator(mixed_precision="bf16")
    seen = []
    model = torch.nn.Sequential(torch.nn.Linear(4, 1))
    model[0].register_forward_hook(lambda _m, _i, output: seen.append(output.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _regression(samples=16))
    inputs, _ = next(iter(loader))
    output = model(inputs)
    assert seen == [torch.bfloat16]
    assert output.dtype == torch.float32


def test_fp16_is_refused_with_a_pointer_to_bf16():
    with pytest.raises(XlaConfigError, match="bf16"):
        Accelerator(mixed_precision="fp16")


def _lengths_loader(lengths: list[int]) -> DataLoader:
    """Batches of 2 sequences whose length is `lengths[i]` for batch i (padded to its longest)."""
    items = [torch.ones(n) for n in lengths for _ in range(2)]

    def collate(batch: list[torch.Tensor]) -> torch.Tensor:
        return torch.nn.utils.rnn.pad_sequence(batch, batch_first=True)

    return DataLoader(items, batch_size=2, collate_fn=collate)


def _train_on_lengths(accelerator: Accelerator, lengths: list[int]) -> None:
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _lengths_loader(lengths))
    for batch in loader:
        accelerator.backward(model(batch.unsqueeze(-1)).mean())
        optimizer.step()
        optimizer.zero_grad()


def test_a_recompilation_storm_is_warned_about_once_naming_the_shape():
    accelerator = Accelerator()
    with pytest.warns(RecompilationWarning, match=r"compiled new graphs.*\(2, 9\)") as caught:
        _train_on_lengths(accelerator, [3, 3, 5, 7, 9, 11, 13, 16, 17, 19])
    assert len([w for w in caught if issubclass(w.category, RecompilationWarning)]) == 1


def test_steady_shapes_raise_no_recompilation_warning():
    accelerator = Accelerator()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompilationWarning)
        _train_on_lengths(accelerator, [23] * 8)


def test_load_state_restores_xlas_random_state(tmp_path):
    """XLA advances its seed at every graph run, so a resumed run cannot draw exactly what the
    uninterrupted one drew after save_state; what the checkpoint gives is the same draws on every
    resume, whatever the generator held before."""
    import torch_xla.core.xla_model as xm

    accelerator = Accelerator()
    accelerator.prepare(torch.nn.Linear(2, 1))
    xm.set_rng_state(1234)
    torch.rand(3, device=accelerator.device).cpu()
    folder = accelerator.save_state(str(tmp_path / "checkpoint"))
    saved = json.loads((tmp_path / "checkpoint" / "xla_random_state_0.json").read_text())["seed"]
    draws = []
    for other_seed in (7, 99):
        xm.set_rng_state(other_seed)
        accelerator.load_state(folder)
        draws.append(torch.rand(3, device=accelerator.device).cpu())
    assert torch.equal(draws[0], draws[1])
    xm.set_rng_state(5)
    accelerator.backend.load_checkpoint(accelerator.prepared, Path(folder))
    assert xm.get_rng_state() == saved


def test_set_seed_seeds_xlas_generator():
    import torch_xla.core.xla_model as xm

    accelerator = Accelerator()
    draws = []
    for seed in (3, 3, 4):
        set_seed(seed)
        assert xm.get_rng_state() == seed
        draws.append(torch.rand(4, device=accelerator.device).cpu())
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], draws[2])


SEED_FIRST = textwrap.dedent(
    """
    import torch_xla
    import torch_xla.core.xla_model as xm

    from accel import Accelerator, set_seed

    set_seed(11)  # before XLA's runtime starts: a notebook seeding before notebook_launcher
    started = torch_xla._XLAC._xla_runtime_is_initialized()
    Accelerator()
    print("SEEDED", started, xm.get_rng_state())
    """
)


def test_set_seed_before_the_runtime_starts_leaves_it_unstarted_and_seeds_at_setup():
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", SEED_FIRST], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"seeding before the runtime ran past 60 s:\n{error.stdout}\n{error.stderr}")
    assert "SEEDED False 11" in done.stdout, f"{done.stdout}\n{done.stderr[-4000:]}"
