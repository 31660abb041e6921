"""The files of a checkpoint folder, and the formats of its model files.

Files of a checkpoint folder (Accelerate's names where it has them):

    model.safetensors, model_<i>.safetensors   (pytorch_model[_<i>].bin with safe_serialization=False)
    optimizer[_<i>].bin, scheduler[_<i>].bin, scaler.pt, custom_checkpoint_<i>.pt
    training_state.json                         step counter and each data loader's position
    random_states_<rank>.safetensors            one per rank, written by that rank (older: .pt)
    checkpoint.json                             format, process count, every file's size and checksum
"""

from __future__ import annotations

import json
from typing import Any

import torch

from accel.checkpointing.weight_files import flat_tensors, with_aliases
from accel.checkpointing.writer import FolderWriter

TRAINING_STATE_NAME = "training_state.json"


def suffix(index: int) -> str:
    return "" if index == 0 else f"_{index}"


def write_model(writer: FolderWriter, index: int, state: dict[str, torch.Tensor], safe: bool) -> str:
    if safe:
        name = f"model{suffix(index)}.safetensors"
        tensors, aliases = flat_tensors(state)
        writer.write_safetensors(name, tensors, {"format": "pt", "accel_aliases": json.dumps(aliases)})
    else:
        name = f"pytorch_model{suffix(index)}.bin"
        writer.write_torch(name, state)
    return name


def model_weights(name: str, loaded: Any) -> dict[str, torch.Tensor]:
    """Return the state dict in what FolderReader gave for model file `name`."""
    if name.endswith(".safetensors"):
        tensors, metadata = loaded
        return with_aliases(tensors, metadata)
    return loaded
