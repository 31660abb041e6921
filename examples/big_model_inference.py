"""Big-model inference: a causal LM larger than its memory budget, its weights spread over CPU and disk.

    python examples/big_model_inference.py
    python examples/big_model_inference.py --hidden_size 1024 --num_layers 16 --cpu_memory 200MiB
    accel launch --cpu --num_processes 1 examples/big_model_inference.py

A small Llama is built from a config (nothing is downloaded) and saved as sharded safetensors with
an index, as `save_pretrained` writes real checkpoints. That happens in a child process, as if
someone else had trained it: this process never holds the full model. Here the model is built on the
meta device (`init_empty_weights`, no memory), and `load_checkpoint_and_dispatch` places it with
`device_map="auto"` within `max_memory`: what fits the CPU budget is loaded into memory, the rest is
written to the offload folder and memory-mapped back one layer at a time during the forward. The
offloaded model then generates tokens greedily.

The last line printed is a JSON object: whether the tokens equal the full model's, how many modules
went to the CPU and to disk, the model's size, and the peak growth of this process's anonymous
memory (RssAnon, what the kernel cannot reclaim by dropping page cache) during load and generation.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from accel import init_empty_weights, load_checkpoint_and_dispatch


def make_config(args: argparse.Namespace) -> LlamaConfig:
    """A Llama of the requested size (untied embeddings, so the output layer can go to disk too)."""
    return LlamaConfig(
        vocab_size=args.vocab_size,
        hidden_size=args.hidden_size,
        intermediate_size=args.hidden_size * 8 // 3,
        num_hidden_layers=args.num_layers,
        num_attention_heads=max(1, args.hidden_size // 64),
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )


def prompt_ids(args: argparse.Namespace) -> torch.Tensor:
    """A fixed prompt of random token ids."""
    generator = torch.Generator().manual_seed(args.seed + 1)
    return torch.randint(0, args.vocab_size, (1, args.prompt_length), generator=generator)


def save_and_generate(args: argparse.Namespace, folder: str) -> list[int]:
    """In a child process: build the full model, save it sharded, return the tokens it generates."""
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(make_config(args)).eval()
    model.save_pretrained(folder, max_shard_size=args.shard_size)
    with torch.no_grad():
        tokens = model.generate(prompt_ids(args), max_new_tokens=args.new_tokens, do_sample=False)
    return tokens[0].tolist()


def rss_anon() -> int:
    """Bytes of this process's anonymous resident memory (Linux)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon:"))


def watch_peak(stop: threading.Event, peak: list[int]) -> Callable[[], None]:
    """Return a loop that samples RssAnon into peak[0] until `stop` is set."""

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_anon())
            time.sleep(0.001)

    return sample


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden_size", type=int, default=384)
    parser.add_argument("--num_layers", type=int, default=8)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--cpu_memory", default="40MiB", help="max_memory for the CPU; the rest goes to disk")
    parser.add_argument("--shard_size", default="20MB", help="max_shard_size of the saved checkpoint")
    parser.add_argument("--prompt_length", type=int, default=8)
    parser.add_argument("--new_tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in ("hidden_size", "num_layers", "vocab_size", "prompt_length", "new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.hidden_size % 64 and args.hidden_size > 64:
        parser.error(f"--hidden_size must be a multiple of 64 (the head size), got {args.hidden_size}")
    return args


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as work:
        checkpoint, offload = Path(work, "checkpoint"), Path(work, "offload")
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as child:
            expected = child.submit(save_and_generate, args, str(checkpoint)).result()

        config = make_config(args)
        with init_empty_weights():
            model = LlamaForCausalLM(config).eval()  # on the meta device: no memory yet
        model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

        baseline, peak, stop = rss_anon(), [0], threading.Event()
        sampler = threading.Thread(target=watch_peak(stop, peak), daemon=True)
        sampler.start()
        start = time.perf_counter()
        model = load_checkpoint_and_dispatch(
            model,
            checkpoint,  # the folder: its model.safetensors.index.json names the shards
            device_map="auto",
            max_memory={"cpu": args.cpu_memory},
            no_split_module_classes=model._no_split_modules,  # a decoder layer stays whole
            offload_folder=offload,
        )
        loaded = time.perf_counter()
        with torch.no_grad():
            tokens = model.generate(prompt_ids(args), max_new_tokens=args.new_tokens, do_sample=False)
        generated = time.perf_counter()
        stop.set()
        sampler.join()
        peak[0] = max(peak[0], rss_anon())

    places = list(model.hf_device_map.values())
    print(f"device map: {model.hf_device_map}")
    print(f"generated: {tokens[0].tolist()}")
    metrics = {
        "tokens_equal": tokens[0].tolist() == expected,
        "new_tokens": len(expected) - args.prompt_length,
        "cpu_modules": places.count("cpu"),
        "disk_modules": places.count("disk"),
        "model_mib": round(model_bytes / 2**20, 1),
        "cpu_budget": args.cpu_memory,
        "peak_anon_growth_mib": round((peak[0] - baseline) / 2**20, 1),
        "load_s": round(loaded - start, 2),
        "generate_s": round(generated - loaded, 2),
    }
    print(json.dumps(metrics))


if __name__ == "__main__":
    main()
