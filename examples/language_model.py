"""Causal language modelling with a tiny GPT-2 built from a config (nothing is downloaded).

    accel launch --cpu --num_processes 2 examples/language_model.py
    accel launch --num_processes 8 --mixed_precision bf16 examples/language_model.py   # 8 GPUs

The corpus is generated here from a small grammar with number agreement ("the lazy dogs chase a
cat ." but "the lazy dog chases a cat ."), tokenized by word, joined into one stream and cut into
fixed-length blocks, as language-model training scripts do with real text. The model's input and
output embeddings are one tied matrix; after `prepare` they still are, which the script checks.
Evaluation perplexity is measured before training and after each epoch, from every process's
per-block losses gathered with `gather_for_metrics`.

The accel part is four lines over a plain PyTorch loop: build an `Accelerator`, `prepare` the
model, optimizer and loaders, call `accelerator.backward(loss)`, and gather for metrics. The last
line printed is a JSON object with the first and final perplexity.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time

import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import GPT2Config, GPT2LMHeadModel

from accel import Accelerator, set_seed

NOUNS = {
    "cat": "cats",
    "dog": "dogs",
    "bird": "birds",
    "fox": "foxes",
    "child": "children",
    "teacher": "teachers",
}
VERBS = {"sees": "see", "chases": "chase", "likes": "like", "follows": "follow", "hears": "hear"}
ADJECTIVES = ["small", "big", "quick", "lazy", "red", "old"]
PLACES = ["in the park", "near the river", "at home", "on the hill"]


def noun_phrase(rng: random.Random) -> tuple[list[str], bool]:
    """Return a noun phrase and whether it is plural."""
    singular = rng.choice(list(NOUNS))
    plural = rng.random() < 0.5
    words = ["the" if plural else rng.choice(["the", "a"])]
    if rng.random() < 0.5:
        words.append(rng.choice(ADJECTIVES))
    words.append(NOUNS[singular] if plural else singular)
    return words, plural


def make_sentence(rng: random.Random) -> list[str]:
    """One sentence: subject, verb agreeing with it, object, an optional place, a full stop."""
    subject, plural = noun_phrase(rng)
    verb = rng.choice(list(VERBS))
    sentence = [*subject, VERBS[verb] if plural else verb, *noun_phrase(rng)[0]]
    if rng.random() < 0.3:
        sentence += rng.choice(PLACES).split()
    return [*sentence, "."]


def make_blocks(sentences: int, block_size: int, vocab: dict[str, int], seed: int) -> torch.Tensor:
    """A (blocks, block_size) tensor of token ids from `sentences` sentences, identical on every process."""
    rng = random.Random(seed)
    stream = [vocab[word] for _ in range(sentences) for word in make_sentence(rng)]
    blocks = len(stream) // block_size
    return torch.tensor(stream[: blocks * block_size]).view(blocks, block_size)


def make_vocab() -> dict[str, int]:
    """Every word the grammar can produce, in a fixed order."""
    words = {"the", "a", ".", *NOUNS, *NOUNS.values(), *VERBS, *VERBS.values(), *ADJECTIVES}
    words |= {word for place in PLACES for word in place.split()}
    return {word: index for index, word in enumerate(sorted(words))}


def next_token_loss(logits: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """Per-block mean cross-entropy of predicting each token from the ones before it."""
    per_token = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().transpose(1, 2), blocks[:, 1:], reduction="none"
    )
    return per_token.mean(dim=1)


def embeddings_are_tied(model: torch.nn.Module) -> bool:
    """True when the output layer uses the input embedding matrix itself (one Parameter)."""
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max_steps", type=int, default=None, help="stop after this many optimizer steps")
    parser.add_argument("--batch_size", type=int, default=16, help="per process")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--train_sentences", type=int, default=6000)
    parser.add_argument("--eval_sentences", type=int, default=1000)
    parser.add_argument("--block_size", type=int, default=32)
    parser.add_argument("--hidden_size", type=int, default=64)
    parser.add_argument("--num_layers", type=int, default=2)
    parser.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"], default=None)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    for name in ("epochs", "batch_size", "train_sentences", "eval_sentences", "hidden_size", "num_layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.block_size < 2:
        parser.error(f"--block_size must be at least 2, got {args.block_size}")
    if args.max_steps is not None and args.max_steps < 1:
        parser.error(f"--max_steps must be at least 1, got {args.max_steps}")
    return args


@torch.no_grad()
def perplexity(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator) -> float:
    """exp(mean next-token loss) over the whole evaluation set, whatever the number of processes."""
    model.eval()
    losses = []
    for (blocks,) in loader:
        block_losses = next_token_loss(model(input_ids=blocks).logits, blocks)
        # One loss per block (all blocks have the same length), from every process, less the
        # blocks repeated to pad the last batch.
        losses.append(accelerator.gather_for_metrics(block_losses).cpu())
    return math.exp(torch.cat(losses).mean().item())


def main() -> None:
    args = parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    set_seed(args.seed)

    vocab = make_vocab()
    train_blocks = make_blocks(args.train_sentences, args.block_size, vocab, seed=args.seed)
    eval_blocks = make_blocks(args.eval_sentences, args.block_size, vocab, seed=args.seed + 1)
    if len(train_blocks) == 0 or len(eval_blocks) == 0:
        raise SystemExit(f"too few sentences for one block of {args.block_size} tokens: raise --*_sentences")
    train_loader = DataLoader(
        torch.utils.data.TensorDataset(train_blocks), batch_size=args.batch_size, shuffle=True
    )
    eval_loader = DataLoader(torch.utils.data.TensorDataset(eval_blocks), batch_size=2 * args.batch_size)

    config = GPT2Config(
        vocab_size=len(vocab),
        n_positions=args.block_size,
        n_embd=args.hidden_size,
        n_layer=args.num_layers,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        bos_token_id=vocab["."],
        eos_token_id=vocab["."],
    )
    model = GPT2LMHeadModel(config)
    assert embeddings_are_tied(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )
    # A wrapper or a device move that copied one of the two would silently untie them.
    if not embeddings_are_tied(accelerator.unwrap_model(model)):
        raise RuntimeError("prepare() untied the input and output embeddings")

    first = perplexity(model, eval_loader, accelerator)
    accelerator.print(
        f"{len(train_blocks)} training and {len(eval_blocks)} evaluation blocks of {args.block_size} tokens, "
        f"vocabulary of {len(vocab)} words, {accelerator.num_processes} process(es); "
        f"perplexity before training {first:.2f}"
    )
    step, final = 0, first
    for epoch in range(1, args.epochs + 1):
        started = time.perf_counter()
        model.train()
        total_loss, batches = torch.zeros((), device=accelerator.device), 0
        bar = tqdm(
            train_loader, desc=f"epoch {epoch}", leave=False, disable=not accelerator.is_local_main_process
        )
        for (blocks,) in bar:
            loss = next_token_loss(model(input_ids=blocks).logits, blocks).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total_loss += loss.detach().float()
            batches += 1
            step += 1
            bar.set_postfix(loss=f"{loss.item():.3f}")
            if step == args.max_steps:
                break
        train_loss = accelerator.reduce(total_loss / max(batches, 1), reduction="mean").item()
        final = perplexity(model, eval_loader, accelerator)
        accelerator.print(
            f"epoch {epoch}/{args.epochs}: train loss {train_loss:.4f}, eval perplexity {final:.3f} "
            f"({time.perf_counter() - started:.1f} s)"
        )
        if step == args.max_steps:
            break

    tied = embeddings_are_tied(accelerator.unwrap_model(model))
    accelerator.print(
        json.dumps(
            {
                "step": step,
                "first_perplexity": round(first, 4),
                "perplexity": round(final, 4),
                "tied_embeddings": tied,
            }
        )
    )
    accelerator.end_training()


if __name__ == "__main__":
    main()
