"""`accel estimate-memory`: the memory a model needs to load in each dtype and to train with AdamW.

Accelerate's `accelerate estimate-memory`, for local models only (a config.json or a factory);
torch, and transformers for a config, are imported only when the command runs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from accel_launch.commands.common import CONTEXT, ConfigProblem, flag

DEFAULT_DTYPES = ("float32", "float16", "bfloat16", "int8", "int4")


class GreedyDtypesCommand(click.Command):
    """Accepts Accelerate's `--dtypes float32 float16 ...` (argparse's nargs="+"), which click's
    options cannot: the values after `--dtypes` are rewritten as repeated `--dtypes VALUE`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rewritten: list[str] = []
        index = 0
        while index < len(args):
            rewritten.append(args[index])
            if args[index] == "--dtypes":
                taken = 0
                while index + 1 < len(args) and looks_like_dtype(args[index + 1], first=taken == 0):
                    rewritten.extend([args[index + 1]] if taken == 0 else ["--dtypes", args[index + 1]])
                    index += 1
                    taken += 1
            index += 1
        return super().parse_args(ctx, rewritten)


def looks_like_dtype(token: str, first: bool) -> bool:
    """True when a word after `--dtypes` is a dtype, not MODEL: the first is always taken (click then
    names it if unknown); later ones while they are plain names that are not a file or folder."""
    if token.startswith("-"):
        return False
    if first:
        return True
    return token.replace("torch.", "").isalnum() and not Path(token).exists()


@click.command("estimate-memory", cls=GreedyDtypesCommand, context_settings=CONTEXT)
@click.argument("model", metavar="MODEL")
@click.option(
    "--dtypes",
    multiple=True,
    metavar="DTYPE...",
    help=f"Dtypes to estimate (any of {', '.join(DEFAULT_DTYPES)}; default: all).",
)
@click.option(
    *flag("num_processes"),
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Also estimate training with weights, gradients and AdamW states sharded over N processes.",
)
@click.option(*flag("trust_remote_code"), is_flag=True, help="Let transformers run a config's own code.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (sizes in bytes) instead.")
def estimate_memory_command(
    model: str, dtypes: tuple[str, ...], num_processes: int | None, trust_remote_code: bool, as_json: bool
) -> None:
    """Estimate a model's memory in each dtype, its largest layer, and training with AdamW.

    MODEL is a transformers config (a folder holding config.json, or the .json file) or a Python
    factory returning a torch.nn.Module, `package.module:function` or `path/to/file.py:function`.
    The model is built on the meta device, so it takes no memory, and nothing is downloaded.
    Training estimates count weights, gradients, AdamW's moments and the step's workspace (not
    activations); with --num_processes, also per process when fully sharded over them.
    """
    from accel_launch.estimate.errors import EstimateError
    from accel_launch.estimate.footprint import check_dtypes, count_model, estimate
    from accel_launch.estimate.model_source import build_meta_model
    from accel_launch.estimate.report import as_json as to_json
    from accel_launch.estimate.report import as_table

    try:
        names = check_dtypes(list(dtypes) or list(DEFAULT_DTYPES))
        count = count_model(build_meta_model(model, trust_remote_code))
    except EstimateError as error:
        raise ConfigProblem(str(error)) from None
    rows = [estimate(count, name, num_processes) for name in names]
    if as_json:
        click.echo(json.dumps(to_json(model, count, rows, num_processes)))
    else:
        click.echo(as_table(model, count, rows, num_processes))
