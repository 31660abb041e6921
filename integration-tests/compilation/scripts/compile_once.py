"""Train a small model one step with `dynamo_backend="inductor"` and print inductor's FX graph cache
counters as JSON: a second launch with the same ACCEL_COMPILE_CACHE_DIR must hit the cache."""

import json
import time

import torch

from accel import Accelerator

started = time.perf_counter()
accelerator = Accelerator(dynamo_backend="inductor")
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
model, optimizer = accelerator.prepare(model, optimizer)
loss = model(torch.randn(4, 8)).pow(2).mean()
accelerator.backward(loss)
optimizer.step()
from torch._dynamo.utils import counters  # noqa: E402 - read after the compile

if accelerator.is_main_process:
    inductor = counters["inductor"]
    print(json.dumps({
        "hits": inductor["fxgraph_cache_hit"],
        "misses": inductor["fxgraph_cache_miss"],
        "seconds": time.perf_counter() - started,
    }))  # fmt: skip
