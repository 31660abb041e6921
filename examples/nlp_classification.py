"""Text classification with a tiny transformer (BERT, built from a config: nothing is downloaded).

    accel launch --cpu --num_processes 2 examples/nlp_classification.py
    accel launch --num_processes 8 --mixed_precision bf16 examples/nlp_classification.py   # 8 GPUs

The corpus is generated here: short reviews of one or two clauses that each say the same thing,
directly or by negating the opposite ("the plot was not dull and superb" is positive), so a
bag of words is not enough: the model must read "not" in front of a word. A few labels are
flipped at random, so about 95% accuracy is the most it can reach. A word-level
tokenizer is built from the corpus, batches are padded to their longest sentence (dynamic
padding), and each epoch ends with accuracy and F1 computed over every process's predictions
with `gather_for_metrics` (which drops the samples repeated to even out the last batch).

The accel part is four lines over a plain PyTorch loop: build an `Accelerator`, `prepare` the
model, optimizer, scheduler and loaders, call `accelerator.backward(loss)`, and gather for
metrics. The last line printed is a JSON object with the final metrics.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence

import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

from accel import Accelerator, set_seed

POSITIVE = ["good", "great", "superb", "lovely", "pleasant", "brilliant", "charming", "moving"]
NEGATIVE = ["bad", "awful", "poor", "dull", "terrible", "boring", "clumsy", "weak"]
SUBJECTS = ["the film", "this book", "the plot", "our dinner", "the hotel", "the music", "that game"]
ADVERBS = ["", "", "really", "quite", "very", "somewhat", "rather"]
JOINERS = ["and", "but", "yet", "and also"]
PAD, UNK, CLS = "[PAD]", "[UNK]", "[CLS]"


def make_review(rng: random.Random) -> tuple[str, int]:
    """Return one review and its label (1: positive). Every clause says the same thing, either
    directly ("superb") or by negating the opposite ("not dull")."""
    label = int(rng.random() < 0.5)
    words = [rng.choice(SUBJECTS), rng.choice(["was", "is", "seemed"])]
    for clause in range(rng.choice([1, 2])):
        if clause:
            words.append(rng.choice(JOINERS))
        negated = rng.random() < 0.4
        positive = bool(label) != negated
        words += [
            rng.choice(ADVERBS),
            "not" if negated else "",
            rng.choice(POSITIVE if positive else NEGATIVE),
        ]
    return " ".join(word for word in words if word), label


def make_corpus(size: int, seed: int, label_noise: float) -> list[tuple[str, int]]:
    """`size` labelled reviews, identical on every process (drawn from their own seeded generator)."""
    rng = random.Random(seed)
    corpus = []
    for _ in range(size):
        text, label = make_review(rng)
        if rng.random() < label_noise:
            label = 1 - label
        corpus.append((text, label))
    return corpus


class WordTokenizer:
    """A word-level tokenizer: one id per word seen in the training corpus, [UNK] for the rest."""

    def __init__(self, texts: Sequence[str]) -> None:
        words = sorted({word for text in texts for word in text.split()})
        self.vocab = {token: index for index, token in enumerate([PAD, UNK, CLS, *words])}
        self.pad_id = self.vocab[PAD]

    def encode(self, text: str) -> list[int]:
        """Return [CLS] + the word ids (BERT classifies from the [CLS] position)."""
        unk = self.vocab[UNK]
        return [self.vocab[CLS], *(self.vocab.get(word, unk) for word in text.split())]


def make_collate(tokenizer: WordTokenizer):
    """A collate function that pads each batch only to its longest sentence."""

    def collate(examples: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
        encoded = [tokenizer.encode(text) for text, _ in examples]
        longest = max(len(ids) for ids in encoded)
        input_ids = torch.full((len(encoded), longest), tokenizer.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(encoded), longest), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
        labels = torch.tensor([label for _, label in examples])
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    return collate


def accuracy_and_f1(predictions: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """Accuracy and the F1 score of the positive class."""
    accuracy = (predictions == labels).float().mean().item()
    true_positive = ((predictions == 1) & (labels == 1)).sum().item()
    predicted, actual = (predictions == 1).sum().item(), (labels == 1).sum().item()
    f1 = 2 * true_positive / (predicted + actual) if predicted + actual else 0.0
    return accuracy, f1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max_steps", type=int, default=None, help="stop after this many optimizer steps")
    parser.add_argument("--batch_size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--train_size", type=int, default=3000)
    parser.add_argument("--eval_size", type=int, default=600)
    parser.add_argument("--label_noise", type=float, default=0.05, help="share of labels flipped at random")
    parser.add_argument("--hidden_size", type=int, default=64)
    parser.add_argument("--num_layers", type=int, default=2)
    parser.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"], default=None)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    for name in ("epochs", "batch_size", "train_size", "eval_size", "hidden_size", "num_layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.max_steps is not None and args.max_steps < 1:
        parser.error(f"--max_steps must be at least 1, got {args.max_steps}")
    return args


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: DataLoader, accelerator: Accelerator) -> tuple[float, float]:
    """Accuracy and F1 over the whole evaluation set, whatever the number of processes."""
    model.eval()
    predictions, labels = [], []
    for batch in loader:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        # Every process's predictions, less the samples repeated to pad the last batch.
        gathered = accelerator.gather_for_metrics((logits.argmax(dim=-1), batch["labels"]))
        predictions.append(gathered[0].cpu())
        labels.append(gathered[1].cpu())
    return accuracy_and_f1(torch.cat(predictions), torch.cat(labels))


def main() -> None:
    args = parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    set_seed(args.seed)

    train_set = make_corpus(args.train_size, args.seed, args.label_noise)
    eval_set = make_corpus(args.eval_size, args.seed + 1, args.label_noise)
    tokenizer = WordTokenizer([text for text, _ in train_set])
    collate = make_collate(tokenizer)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, collate_fn=collate)
    eval_loader = DataLoader(eval_set, batch_size=2 * args.batch_size, collate_fn=collate)

    config = BertConfig(
        vocab_size=len(tokenizer.vocab),
        hidden_size=args.hidden_size,
        num_hidden_layers=args.num_layers,
        num_attention_heads=2,
        intermediate_size=2 * args.hidden_size,
        max_position_embeddings=32,
        pad_token_id=tokenizer.pad_id,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    # Written for one process, as in Accelerate: on N processes the prepared scheduler steps N times
    # per optimizer step, since each step then consumes N batches.
    schedule_steps = args.epochs * len(train_loader)
    if args.max_steps is not None:
        schedule_steps = min(schedule_steps, args.max_steps * accelerator.num_processes)
    scheduler = get_linear_schedule_with_warmup(optimizer, max(1, schedule_steps // 10), schedule_steps)
    model, optimizer, scheduler, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, scheduler, train_loader, eval_loader
    )
    total_steps = args.epochs * len(train_loader)
    if args.max_steps is not None:
        total_steps = min(total_steps, args.max_steps)

    accelerator.print(
        f"{len(train_set)} training and {len(eval_set)} evaluation reviews, vocabulary of "
        f"{len(tokenizer.vocab)} words, {sum(p.numel() for p in model.parameters()):,} parameters, "
        f"{accelerator.num_processes} process(es), {total_steps} steps"
    )
    step, metrics = 0, {}
    for epoch in range(1, args.epochs + 1):
        started = time.perf_counter()
        model.train()
        total_loss, batches = torch.zeros((), device=accelerator.device), 0
        bar = tqdm(
            train_loader, desc=f"epoch {epoch}", leave=False, disable=not accelerator.is_local_main_process
        )
        for batch in bar:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            total_loss += loss.detach().float()
            batches += 1
            step += 1
            bar.set_postfix(loss=f"{loss.item():.3f}")
            if step == total_steps:
                break
        train_loss = accelerator.reduce(total_loss / max(batches, 1), reduction="mean").item()
        accuracy, f1 = evaluate(model, eval_loader, accelerator)
        metrics = {"epoch": epoch, "step": step, "train_loss": round(train_loss, 4)}
        metrics |= {"accuracy": round(accuracy, 4), "f1": round(f1, 4)}
        accelerator.print(
            f"epoch {epoch}/{args.epochs}: train loss {train_loss:.4f}, eval accuracy {accuracy:.3f}, "
            f"F1 {f1:.3f} ({time.perf_counter() - started:.1f} s)"
        )
        if step == total_steps:
            break

    accelerator.print(json.dumps(metrics))
    accelerator.end_training()


if __name__ == "__main__":
    main()
