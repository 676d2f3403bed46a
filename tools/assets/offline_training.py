"""The training loop shared by the offline causal-LM builders (``make_offline_gpt2.py``, ``make_offline_llama.py``).

Each builder owns its tokenizer, its model config and its output folder; what is the same for every small
decoder trained here lives in this module: packing documents into one id stream, the learning-rate schedule,
the AdamW parameter groups, training on random windows of the stream, the held-out loss, the LAMBADA-style
last-word scores on ``data/lambada_offline.jsonl`` and the folder-size check.

The byte-level BPE tokenizer trainer is shared too (each builder adds its own special tokens and post-processor).

``args`` is the builder's argparse namespace; the fields read here are ``steps``, ``warmup_steps``, ``lr``,
``weight_decay``, ``batch_size``, ``seq_len``, ``seed`` and ``eval_every``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm import tqdm


def byte_level_bpe(texts: list[str], vocab_size: int, special_tokens: list[str]) -> Tokenizer:
    """Byte-level BPE as GPT-2's: no prefix space, the 256-byte alphabet as the initial one (every byte encodable:
    an exact round-trip), `vocab_size` entries with `special_tokens` first. The caller sets its post-processor."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=special_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def encode_stream(tok, texts: list[str], eos_id: int, bos_id: int | None = None) -> torch.Tensor:
    """Concatenate documents into one id stream: [bos] doc eos, [bos] doc eos, ...  (``tok``: a ``tokenizers``
    Tokenizer whose post-processor adds nothing, or adds only the bos given here)."""
    ids: list[int] = []
    for text in texts:
        if bos_id is not None:
            ids.append(bos_id)
        ids.extend(tok.encode(text, add_special_tokens=False).ids)
        ids.append(eos_id)
    return torch.tensor(ids, dtype=torch.long)


def lr_at(step: int, args: argparse.Namespace) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: torch.nn.Module, args: argparse.Namespace) -> torch.optim.Optimizer:
    # Usual GPT recipe: decay only the 2-D matmul weights; biases, norms and the embeddings (the token
    # embedding doubles as the tied LM head) are left undecayed.
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    decay, no_decay = [], []
    for param in model.parameters():
        (decay if param.dim() >= 2 and id(param) not in embeddings else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))


@torch.no_grad()
def held_out_loss(model: torch.nn.Module, ids: torch.Tensor, seq_len: int) -> float:
    """Token-weighted mean next-token loss over non-overlapping windows of the held-out stream."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(ids) - 1, seq_len):
        window = ids[start : start + seq_len].unsqueeze(0)  # [1, S]
        if window.shape[1] < 2:
            break
        n_predicted = window.shape[1] - 1
        mask = torch.ones_like(window)
        total += model(input_ids=window, attention_mask=mask, labels=window).loss.item() * n_predicted
        count += n_predicted
    model.train(was_training)
    return total / count


def train(model: torch.nn.Module, train_ids: torch.Tensor, eval_ids: torch.Tensor, args: argparse.Namespace) -> float:
    """Train on random windows of the packed stream; return the mean loss of the last 100 steps."""
    optimizer = make_optimizer(model, args)
    batch_gen = torch.Generator().manual_seed(args.seed)  # window sampling, independent of dropout RNG
    max_start = len(train_ids) - args.seq_len
    recent: list[float] = []
    model.train()
    bar = tqdm(range(args.steps), desc="train", unit="step", mininterval=5)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        starts = torch.randint(0, max_start + 1, (args.batch_size,), generator=batch_gen)
        batch = torch.stack([train_ids[s : s + args.seq_len] for s in starts.tolist()])  # [B, S]
        # Explicit all-ones mask: the document separators are content here, not padding.
        loss = model(input_ids=batch, attention_mask=torch.ones_like(batch), labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        recent = (recent + [loss.item()])[-100:]
        bar.set_postfix(loss=f"{sum(recent) / len(recent):.3f}", refresh=False)
        if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < args.steps:
            # Printed for monitoring only; nothing is selected on it.
            tqdm.write(f"step {step + 1}: train loss {sum(recent) / len(recent):.3f}, "
                       f"held-out loss {held_out_loss(model, eval_ids, args.seq_len):.3f}")
    return sum(recent) / len(recent)


@torch.no_grad()
def lambada_scores(model: torch.nn.Module, tokenizer, path: Path) -> tuple[float, float]:
    """(accuracy, perplexity) of each passage's last word given the rest, as lm-eval-harness scores LAMBADA
    (and as ``run.py accuracy`` reports them as "lm-eval acc" / "lm-eval ppl"): context = the passage without
    its last word, with the tokenizer's specials; target = " " + that word, without them."""
    model.eval()
    log_probs, hits = [], 0
    lines = path.read_text(encoding="utf-8").splitlines()
    for line in lines:
        context, word = json.loads(line)["text"].rsplit(" ", 1)
        ctx = tokenizer(context)["input_ids"]
        target = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        x = torch.tensor([ctx + target])  # [1, S]
        logp = model(input_ids=x).logits[0, len(ctx) - 1 : -1].log_softmax(-1)  # [len(target), V]
        want = torch.tensor(target)
        log_probs.append(float(logp.gather(1, want[:, None]).sum()))
        hits += bool((logp.argmax(-1) == want).all())
    return hits / len(lines), math.exp(-sum(log_probs) / len(log_probs))


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
