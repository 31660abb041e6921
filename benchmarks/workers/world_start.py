"""A job that only starts the world and ends: what launching costs before any training.

    <launcher> world_start.py raw|accel|accelerate

raw: `init_process_group("gloo")` and a barrier; accel and Accelerate: `Accelerator()` and
`wait_for_everyone()`. Each imports only its own library.
"""

from __future__ import annotations

import sys


def main() -> None:
    contender = sys.argv[1] if len(sys.argv) > 1 else ""
    if contender == "raw":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        dist.barrier()
        dist.destroy_process_group()
    elif contender in ("accel", "accelerate"):
        if contender == "accel":
            from accel import Accelerator
        else:
            from accelerate import Accelerator  # type: ignore[no-redef]
        Accelerator().wait_for_everyone()
    else:
        sys.exit(f"world_start.py: unknown contender {contender!r} (raw, accel or accelerate)")


if __name__ == "__main__":
    main()
