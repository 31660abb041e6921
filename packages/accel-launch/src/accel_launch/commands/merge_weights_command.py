"""`accel merge-weights`: a model's sharded checkpoint into one safetensors file (or shards).

Accelerate's `accelerate merge-weights`, for the checkpoints `save_state` writes with
SHARDED_STATE_DICT; torch and safetensors are imported only when the command runs."""

from __future__ import annotations

from typing import Any

import click

from accel_launch.commands.common import CONTEXT, ConfigProblem, flag


class MergeProblem(ConfigProblem):
    """A checkpoint or output that cannot be used: one `accel merge-weights: ...` line, exit code 2."""

    def show(self, file: Any = None) -> None:
        click.echo(f"accel merge-weights: {self.message}", err=True)


@click.command("merge-weights", context_settings=CONTEXT)
@click.argument("checkpoint_directory", metavar="CHECKPOINT_DIRECTORY")
@click.argument("output_path", metavar="OUTPUT_PATH")
@click.option(
    *flag("unsafe_serialization"),
    is_flag=True,
    help="Write pytorch_model.bin (torch.save) instead of model.safetensors (not recommended).",
)
@click.option(
    *flag("remove_checkpoint_dir"),
    is_flag=True,
    help="Remove the merged DCP folder once the written weights were read back equal.",
)
@click.option(
    *flag("max_shard_size"),
    default="10GB",
    show_default=True,
    metavar="SIZE",
    help="Largest file written; a bigger model is written as shards plus an index.",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace the weight files of an earlier merge in OUTPUT_PATH."
)
def merge_weights_command(
    checkpoint_directory: str,
    output_path: str,
    unsafe_serialization: bool,
    remove_checkpoint_dir: bool,
    max_shard_size: str,
    overwrite: bool,
) -> None:
    """Merge a sharded checkpoint (SHARDED_STATE_DICT) into one set of weights: model.safetensors.

    CHECKPOINT_DIRECTORY is a model's torch.distributed.checkpoint folder (as save_state writes it
    for a sharded model, or Accelerate's) or the save_state folder holding it; a save_state folder of
    several models is refused, name the model's folder instead. OUTPUT_PATH is the folder written
    into: model.safetensors, or model-0000i-of-0000N.safetensors and model.safetensors.index.json
    above --max_shard_size. The whole model is read into memory on the CPU; every written file is
    read back and compared before it replaces anything. The checkpoint's metadata is a pickle: merge
    only checkpoints you trust.
    """
    from accel_launch.checkpoints.errors import MergeError
    from accel_launch.checkpoints.merge import merge_weights

    try:
        result = merge_weights(
            checkpoint_directory,
            output_path,
            safe_serialization=not unsafe_serialization,
            remove_checkpoint_dir=remove_checkpoint_dir,
            overwrite=overwrite,
            max_shard_size=max_shard_size,
        )
    except MergeError as error:
        raise MergeProblem(str(error)) from None
    source = result.source
    if source.found_in is not None:
        click.echo(
            f"accel merge-weights: {source.found_in} holds the model folder {source.path.name}; merging it"
        )
    written = result.written
    files = (
        str(written[0])
        if len(written) == 1
        else f"{written[0].parent} ({len(written) - 1} shards and {written[-1].name})"
    )
    click.echo(
        f"accel merge-weights: {result.tensors} weights ({result.total_bytes:,} bytes) of {source.path} "
        f"written to {files}, read back equal"
    )
    if result.replaced:
        click.echo(f"accel merge-weights: replaced {', '.join(str(path) for path in result.replaced)}")
    if result.removed_source:
        click.echo(f"accel merge-weights: removed {source.path}")
    elif remove_checkpoint_dir:
        left = ", ".join(path.name for path in result.left_in_source)
        click.echo(
            f"accel merge-weights: removed the checkpoint files of {source.path}; left the folder ({left})"
        )
