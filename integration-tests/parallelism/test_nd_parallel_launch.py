"""N-D parallelism on 4 real CPU processes (gloo): each mesh trains a small transformer (attention and
MLP blocks, tied embedding) to the weights of plain training on the same global batches.

One job runs every mesh (each job start costs seconds): per mesh, the Accelerator trains with
accumulation and clipping, and each rank also trains a plain copy of the model on the global batch
of every step, gathered from one rank of each data shard; the full weights must agree.
"""

from __future__ import annotations

import pytest
import torch

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

VOCAB, WIDTH, HEADS, SEQUENCE = 32, 16, 4, 8
CLIP = 0.5
ACCUMULATION = 2
FP32_TOLERANCE = 1e-5
BF16_TOLERANCE = 5e-2  # bf16 parameters in the forward, against the fp32 reference
PLAN = {
    "blocks.*.attention.query": "colwise",
    "blocks.*.attention.key": "colwise",
    "blocks.*.attention.value": "colwise",
    "blocks.*.attention.out": "rowwise",
    "blocks.*.mlp.up": "colwise",
    "blocks.*.mlp.down": "rowwise",
}
MESHES = {
    "dp_shard 2 x tp 2": {"dp_shard_size": 2, "tp_size": 2},
    "dp_replicate 2 x dp_shard 2": {"dp_replicate_size": 2, "dp_shard_size": 2},
    "dp_replicate 2 x tp 2": {"dp_replicate_size": 2, "tp_size": 2},
    "tp 4": {"tp_size": 4},
}


class Attention(torch.nn.Module):
    """Without biases, as Llama's: a key bias shifts every score of a query alike, so softmax gives
    it a zero gradient, whose rounding noise AdamW would turn into steps of the learning rate's size."""

    def __init__(self) -> None:
        super().__init__()
        self.query, self.key, self.value, self.out = (
            torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        head = WIDTH // HEADS

        def heads(t: torch.Tensor) -> torch.Tensor:  # -1: a rank holds some of the heads
            return t.view(batch, length, -1, head).transpose(1, 2)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, length, -1))


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.attention, self.mlp = Attention(), Mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _data() -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (64, SEQUENCE + 1), generator=generator)
    return torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:])


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))


def _reset() -> None:
    from accel_state import AcceleratorState, GradientState

    AcceleratorState._reset_state()
    GradientState._reset_state()


def _one_copy_per_shard(gathered: torch.Tensor, world: int, ranks_per_shard: int) -> torch.Tensor:
    """The rows of ranks 0, k, 2k, ... of a gather in rank order (k ranks read each shard)."""
    return torch.cat(
        [chunk for rank, chunk in enumerate(gathered.chunk(world)) if rank % ranks_per_shard == 0]
    )


def train(sizes: dict, mixed_precision: str = "no") -> dict:
    """Train TinyLM on the mesh `sizes` and, beside it, a plain copy on the same global batches."""
    from accel import Accelerator, ParallelismConfig, TorchTensorParallelConfig

    _reset()
    config = ParallelismConfig(**sizes, tp_handler=TorchTensorParallelConfig(tp_plan=PLAN))
    accelerator = Accelerator(
        parallelism_config=config, gradient_accumulation_steps=ACCUMULATION, mixed_precision=mixed_precision
    )
    torch.manual_seed(0)
    model = TinyLM()
    reference = TinyLM()
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(_data(), batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    world, per_shard = accelerator.num_processes, config.non_data_parallel_size
    same_batch_in_group, norms, reference_norms, steps, losses = True, [], [], 0, []
    for _ in range(2):
        for x, y in loader:
            everyone = accelerator.gather(x)
            groups = everyone.chunk(world // per_shard)
            same_batch_in_group &= all(torch.equal(g, g[: len(x)].repeat(per_shard, 1)) for g in groups)
            global_x = _one_copy_per_shard(everyone, world, per_shard)
            global_y = _one_copy_per_shard(accelerator.gather(y), world, per_shard)
            with accelerator.accumulate(model):
                loss = _loss(model, x, y)
                losses.append(float(loss))
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    norms.append(float(accelerator.clip_grad_norm_(model.parameters(), CLIP)))
                optimizer.step()
                optimizer.zero_grad()
            (_loss(reference, global_x, global_y) / ACCUMULATION).backward()
            steps += 1
            if steps % ACCUMULATION == 0:
                reference_norms.append(float(torch.nn.utils.clip_grad_norm_(reference.parameters(), CLIP)))
                reference_optimizer.step()
                reference_optimizer.zero_grad()
    from torch.distributed.tensor import Shard, distribute_tensor

    whole = torch.arange(8.0).reshape(4, 2)
    split = distribute_tensor(whole, accelerator.torch_device_mesh["tp"], [Shard(0)])
    dtensor_collectives = torch.equal(accelerator.gather(split), whole.repeat(world, 1)) and torch.equal(
        accelerator.reduce(split, "sum"), whole * world
    )
    full = accelerator.get_state_dict(model)
    inner = accelerator.unwrap_model(model)
    difference = None
    if accelerator.is_main_process:
        expected = reference.state_dict()
        assert full.keys() == expected.keys(), (sorted(full), sorted(expected))
        difference = max(float((full[k].float() - expected[k]).abs().max()) for k in full)
    return {
        "difference": difference,
        "moved": float((reference.embed.weight - TinyLM().embed.weight).abs().max()),
        "tied": inner.head.weight is inner.embed.weight,
        "same_batch_in_group": same_batch_in_group,
        "global_rows": len(global_x),
        "norms": norms,
        "reference_norms": reference_norms,
        "mesh": list(accelerator.torch_device_mesh.mesh_dim_names),
        "losses": losses,
        "dtensor_collectives": dtensor_collectives,
        "type": accelerator.distributed_type.value,
    }


def train_each(meshes: list[dict], mixed_precision: str = "no") -> list[dict]:
    return [train(sizes, mixed_precision) for sizes in meshes]


def test_every_mesh_trains_to_the_weights_of_plain_training():
    results = run_on_ranks(train_each, 4, list(MESHES.values()), timeout=600)
    main = results[0]
    for name, result in zip(MESHES, main, strict=True):
        assert result["type"] == "FSDP", name
        assert result["mesh"][:4] == ["dp_replicate", "dp_shard", "cp", "tp"], name
        assert result["same_batch_in_group"], f"{name}: ranks of one tp group must read one batch"
        assert result["global_rows"] == 4 * (4 // MESHES[name].get("tp_size", 1)), name
        assert result["tied"], f"{name}: the head must stay tied to the embedding"
        assert result["dtensor_collectives"], f"{name}: gather and reduce take a DTensor's full tensor"
        assert result["norms"] == pytest.approx(result["reference_norms"], rel=1e-4), name
        assert max(result["reference_norms"]) > CLIP, f"{name}: the clip must act"
        assert result["difference"] <= FP32_TOLERANCE, f"{name}: weights differ by {result['difference']}"
    for rank in results[1:]:
        assert [r["norms"] for r in rank] == [r["norms"] for r in main], "every rank sees the global norm"


def test_bf16_runs_as_fsdps_policy_on_the_mesh_and_trains():
    meshes = [{"dp_shard_size": 2, "tp_size": 2}, {"dp_replicate_size": 2, "tp_size": 2}]
    for result in run_on_ranks(train_each, 4, meshes, "bf16", timeout=600)[0]:
        first, last = sum(result["losses"][:8]) / 8, sum(result["losses"][-8:]) / 8
        assert last < 0.9 * first, f"bf16 must train: mean loss {first} -> {last}"
        # bf16 really runs (the weights leave fp32's by more than rounding) and stays close.
        assert 1e-4 < result["difference"] <= BF16_TOLERANCE, result["difference"]
        assert result["tied"] and result["same_batch_in_group"]


# Checkpoints between meshes ------------------------------------------------------------------------
STEPS = 3  # steps before the save, and after it


def _global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, VOCAB, (8, SEQUENCE + 1), generator=generator)
    return tokens[:, :-1], tokens[:, 1:]


def _mesh_run(sizes: dict, state_dict_type: str, seed: int):  # noqa: ANN202
    from accel import (
        Accelerator,
        FullyShardedDataParallelPlugin,
        ParallelismConfig,
        TorchTensorParallelConfig,
    )

    _reset()
    config = ParallelismConfig(**sizes, tp_handler=TorchTensorParallelConfig(tp_plan=PLAN))
    plugin = FullyShardedDataParallelPlugin(state_dict_type=state_dict_type)
    accelerator = Accelerator(parallelism_config=config, fsdp_plugin=plugin)
    torch.manual_seed(seed)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def _steps(accelerator, model, optimizer, first: int) -> None:  # noqa: ANN001
    layout = accelerator.backend.data_layout()
    for step in range(first, first + STEPS):
        x, y = _global_batch(step)
        rows = len(x) // layout.num_shards
        mine = slice(layout.shard_index * rows, (layout.shard_index + 1) * rows)
        accelerator.backward(_loss(model, x[mine], y[mine]))
        optimizer.step()
        optimizer.zero_grad()


def save_then_continue(sizes: dict, state_dict_type: str, folder: str) -> dict:
    """Train STEPS steps on mesh `sizes`, save_state, train STEPS more; return the full weights."""
    accelerator, model, optimizer = _mesh_run(sizes, state_dict_type, seed=0)
    _steps(accelerator, model, optimizer, 0)
    accelerator.save_state(folder)
    _steps(accelerator, model, optimizer, STEPS)
    return {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}


def load_then_continue(sizes: dict, state_dict_type: str, folder: str) -> dict:
    """Build the model afresh (other weights) on mesh `sizes`, load_state, train the same STEPS."""
    accelerator, model, optimizer = _mesh_run(sizes, state_dict_type, seed=1)
    accelerator.load_state(folder)
    _steps(accelerator, model, optimizer, STEPS)
    return {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}


def checkpoint_round_trips(folder: str, state_dict_type: str, targets: list[dict]) -> list[dict]:
    saved = save_then_continue({"dp_shard_size": 2, "tp_size": 2}, state_dict_type, folder)
    return [saved, *(load_then_continue(sizes, state_dict_type, folder) for sizes in targets)]


def _max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((torch.tensor(a[k]) - torch.tensor(b[k])).abs().max()) for k in a)


@pytest.mark.parametrize("state_dict_type", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_a_checkpoint_of_one_mesh_resumes_exactly_on_another(tmp_path, state_dict_type):
    targets = [
        {"dp_shard_size": 2, "tp_size": 2},  # the same mesh
        {"dp_shard_size": 4},
        {"tp_size": 4},
        {"dp_replicate_size": 2, "tp_size": 2},
    ]
    folder = str(tmp_path / "checkpoint")
    saved, *resumed = run_on_ranks(checkpoint_round_trips, 4, folder, state_dict_type, targets, timeout=600)[
        0
    ]
    for sizes, weights in zip(targets, resumed, strict=True):
        assert _max_difference(weights, saved) <= FP32_TOLERANCE, f"{sizes}: resumed weights differ"
    if state_dict_type == "SHARDED_STATE_DICT":  # resharded onto another number of processes too
        on_two = run_on_ranks(load_then_continue, 2, {"tp_size": 2}, state_dict_type, folder, timeout=300)[0]
        assert _max_difference(on_two, saved) <= FP32_TOLERANCE


# A transformers model with its own plan ------------------------------------------------------------
def train_llama(sizes: dict) -> dict:
    """Train a tiny LlamaForCausalLM (tied embedding) on mesh `sizes` with its own tp_plan, and a
    plain copy on the same global batches; return the largest weight difference (main process)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from accel import Accelerator, ParallelismConfig

    _reset()
    accelerator = Accelerator(parallelism_config=ParallelismConfig(**sizes))
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=SEQUENCE, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    reference = LlamaForCausalLM(config)
    reference.load_state_dict(model.state_dict())
    # lr 1e-3: AdamW scales the rounding noise of small gradients (summed in another order on each
    # mesh) by lr / sqrt(v); a wrong split would still move the weights by ~lr per step.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3)
    initial = {k: v.clone() for k, v in reference.state_dict().items()}
    model, optimizer = accelerator.prepare(model, optimizer)
    layout = accelerator.backend.data_layout()
    for step in range(4):
        x, y = _global_batch(step)
        rows = len(x) // layout.num_shards
        mine = slice(layout.shard_index * rows, (layout.shard_index + 1) * rows)
        logits = model(input_ids=x[mine]).logits
        accelerator.backward(
            torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y[mine].reshape(-1))
        )
        optimizer.step()
        optimizer.zero_grad()
        expected = reference(input_ids=x).logits
        torch.nn.functional.cross_entropy(expected.reshape(-1, VOCAB), y.reshape(-1)).backward()
        reference_optimizer.step()
        reference_optimizer.zero_grad()
    inner = accelerator.unwrap_model(model)
    split = type(inner.model.layers[0].self_attn.q_proj.weight).__name__
    full = accelerator.get_state_dict(model)
    difference = None
    if accelerator.is_main_process:
        expected_weights = reference.state_dict()
        difference = max(float((full[k] - expected_weights[k]).abs().max()) for k in expected_weights)
    return {
        "difference": difference,
        "moved": max(float((v - initial[k]).abs().max()) for k, v in reference.state_dict().items()),
        "tied": inner.lm_head.weight is inner.model.embed_tokens.weight,
        "split": split,
    }


def test_a_transformers_llama_trains_with_its_own_plan():
    pytest.importorskip("transformers", reason="the integration session installs transformers")
    result = run_on_ranks(train_llama, 4, {"dp_shard_size": 2, "tp_size": 2}, timeout=400)[0]
    assert result["split"] == "DTensor" and result["tied"], result
    assert result["moved"] > 100 * FP32_TOLERANCE, result
    assert result["difference"] <= FP32_TOLERANCE, result


# The loop on a mesh: the loader's options, resume mid-epoch, save_model ----------------------------
LOOP_MESH = {"dp_shard_size": 2, "tp_size": 2}  # 2 data shards of 2 tensor-parallel ranks each


def _loop_accelerator(**options):  # noqa: ANN202
    from accel import Accelerator, ParallelismConfig, TorchTensorParallelConfig

    _reset()
    config = ParallelismConfig(**LOOP_MESH, tp_handler=TorchTensorParallelConfig(tp_plan=PLAN))
    return Accelerator(parallelism_config=config, **options)


def _gathered_rows(accelerator, batch: torch.Tensor) -> list:  # noqa: ANN001
    """Every rank's batch in rank order (a list per rank), to check what each data shard read."""
    return [chunk.tolist() for chunk in accelerator.gather(batch[None]).unbind()]


def loop_on_a_mesh(folder: str) -> dict:
    """split_batches, even_batches with gather_for_metrics, resume mid-epoch and save_model, on the
    (dp_shard 2, tp 2) mesh; return what the main process checks."""
    from torch.utils.data import DataLoader

    from accel.utils import gather_object

    out: dict = {}
    # split_batches: the global batch of 8 is cut between the 2 data shards, not the 4 ranks.
    accelerator = _loop_accelerator(split_batches=True)
    loader = accelerator.prepare(DataLoader(torch.arange(32), batch_size=8))
    out["split"] = [_gathered_rows(accelerator, batch) for batch in loader]

    # even_batches: 13 samples in batches of 2 per shard; gather_for_metrics gives each sample once.
    accelerator = _loop_accelerator()
    loader = accelerator.prepare(DataLoader(torch.arange(13), batch_size=2))
    out["metrics"] = [x for batch in loader for x in accelerator.gather_for_metrics(batch).tolist()]
    accelerator = _loop_accelerator(even_batches=False)
    loader = accelerator.prepare(DataLoader(torch.arange(13), batch_size=2))
    seen = [x for batch in loader for x in batch.tolist()]
    out["uneven"] = gather_object([seen])

    # Resume mid-epoch (shuffled loader, torch's default sampler): 3 batches, save_state, then a new
    # job loads the state and skips them; head + rest must be the whole epoch on every rank.
    def job():  # noqa: ANN202
        accelerator = _loop_accelerator()
        torch.manual_seed(0)
        model = TinyLM()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        loader = DataLoader(_data(), batch_size=4, shuffle=True)
        return (accelerator, *accelerator.prepare(model, optimizer, loader))

    accelerator, model, optimizer, loader = job()
    whole_epoch = [x.tolist() for x, _ in loader]
    accelerator, model, optimizer, loader = job()
    head = []
    for x, _ in loader:
        head.append(x.tolist())
        if len(head) == 3:
            accelerator.save_state(f"{folder}/state")
            break
    accelerator, model, optimizer, loader = job()
    accelerator.load_state(f"{folder}/state")
    rest = [x.tolist() for x, _ in accelerator.skip_first_batches(loader, 3)]
    out["resume"] = gather_object([(head + rest == whole_epoch, len(whole_epoch))])
    out["shards_differ"] = gather_object([whole_epoch[0]])

    # save_model on the mesh: one safetensors file of full tensors, loadable by a plain model.
    accelerator.save_model(model, f"{folder}/model")
    full = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        from safetensors.torch import load_file

        written = load_file(f"{folder}/model/model.safetensors")
        plain = TinyLM()
        missing, unexpected = plain.load_state_dict(written, strict=False)
        out["saved_equal"] = all(torch.equal(plain.state_dict()[k], full[k]) for k in full)
        out["not_loaded"] = sorted([*missing, *unexpected])  # the tied head is the embedding
    accelerator.wait_for_everyone()
    return out


def test_the_loop_keeps_its_exactness_over_the_data_parallel_ranks(tmp_path):
    result = run_on_ranks(loop_on_a_mesh, 4, str(tmp_path), timeout=400)[0]
    for step, ranks in enumerate(result["split"]):  # ranks 0-1 read shard 0, ranks 2-3 shard 1
        assert ranks[0] == ranks[1] and ranks[2] == ranks[3], f"step {step}: a tp group read two batches"
        assert ranks[0] + ranks[2] == list(range(8 * step, 8 * step + 8)), f"step {step}: {ranks}"
    assert result["metrics"] == list(range(13)), "gather_for_metrics: each sample once, in order"
    shard_0, _, shard_1, _ = result["uneven"]
    assert result["uneven"][0] == result["uneven"][1] and result["uneven"][2] == result["uneven"][3]
    assert sorted(shard_0 + shard_1) == list(range(13)), result["uneven"]
    for rank, (exact, batches) in enumerate(result["resume"]):
        assert exact and batches == 64 // 4 // 2, f"rank {rank}: the resumed epoch differs"
    first = result["shards_differ"]
    assert first[0] == first[1] and first[2] == first[3] and first[0] != first[2], first
    assert result["saved_equal"], "save_model must write the full weights"
    assert set(result["not_loaded"]) <= {"head.weight"}, result["not_loaded"]
