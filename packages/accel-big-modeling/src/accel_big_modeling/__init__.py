"""accel-big-modeling: big-model inference with Accelerate's names (empty init, device maps, offload)."""

from accel_big_modeling.__about__ import __version__
from accel_big_modeling.checkpoints.files import load_state_dict
from accel_big_modeling.checkpoints.loading import load_checkpoint_in_model
from accel_big_modeling.device_map.balanced import get_balanced_memory
from accel_big_modeling.device_map.check import check_device_map
from accel_big_modeling.device_map.infer import clean_device_map, infer_auto_device_map
from accel_big_modeling.dispatch.dispatch import dispatch_model
from accel_big_modeling.dispatch.load_and_dispatch import load_checkpoint_and_dispatch
from accel_big_modeling.dispatch.offload import cpu_offload, cpu_offload_with_hook, disk_offload
from accel_big_modeling.empty_init import init_empty_weights, init_on_device
from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.memory.max_memory import get_max_memory
from accel_big_modeling.memory.module_sizes import compute_module_sizes, named_module_tensors
from accel_big_modeling.memory.sizes import convert_file_size_to_int, dtype_byte_size
from accel_big_modeling.offload.loader import OffloadedWeightsLoader, PrefixedDataset
from accel_big_modeling.offload.storage import offload_state_dict
from accel_big_modeling.placement import set_module_tensor_to_device
from accel_big_modeling.tied import find_tied_parameters, retie_parameters

__all__ = [
    "BigModelingError",
    "OffloadedWeightsLoader",
    "PrefixedDataset",
    "__version__",
    "check_device_map",
    "clean_device_map",
    "compute_module_sizes",
    "convert_file_size_to_int",
    "cpu_offload",
    "cpu_offload_with_hook",
    "disk_offload",
    "dispatch_model",
    "dtype_byte_size",
    "find_tied_parameters",
    "get_balanced_memory",
    "get_max_memory",
    "infer_auto_device_map",
    "init_empty_weights",
    "init_on_device",
    "load_checkpoint_and_dispatch",
    "load_checkpoint_in_model",
    "load_state_dict",
    "named_module_tensors",
    "offload_state_dict",
    "retie_parameters",
    "set_module_tensor_to_device",
]
