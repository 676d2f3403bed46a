"""Build the offline default GPT-2 model: a tiny GPT-2 trained from scratch on local text.

The harness must run without the HuggingFace Hub, so its default model is built
here from text that ships with the OS and the interpreter (see
``tools/assets/offline_corpus.py``).  The result is a regular HuggingFace folder
(``config.json``, ``model.safetensors``, ``tokenizer.json`` ...) that
``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained`` load offline.

Steps:
  1. train a byte-level BPE tokenizer (GPT-2 style, ``<|endoftext|>`` = last id);
  2. pack the training documents, separated by ``<|endoftext|>``, into one stream;
  3. train a 4-layer GPT2LMHeadModel on random 128-token windows of that stream;
  4. measure held-out perplexity, save, reload and sample as a smoke test.

Everything is seeded and the step count is fixed (not time-based), so a re-run
reproduces the same weights on the same software stack.

Rebuild (about 10-15 minutes on 2 CPU cores):
    .venv/bin/python tools/assets/make_offline_gpt2.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

# The whole point is to work without the Hub; fail loudly instead of downloading.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from tokenizers import Tokenizer, processors
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from offline_corpus import SEED, eval_documents, split_topic_names, train_documents  # noqa: E402
from offline_training import byte_level_bpe, encode_stream, folder_bytes, held_out_loss, train  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "GPT2" / "offline" / "gpt2-offline"
EOS = "<|endoftext|>"
MAX_FOLDER_BYTES = 12 * 1024 * 1024


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--vocab-size", type=int, default=4096, help="including <|endoftext|>")
    p.add_argument("--n-embd", type=int, default=192)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-positions", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=250, help="held-out loss print interval (monitoring only)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args()


# --------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE exactly like GPT-2's, <|endoftext|> the last id (as GPT-2's 50256)."""
    tok = byte_level_bpe(texts, vocab_size - 1, [])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([EOS])
    assert tok.get_vocab_size() == vocab_size and tok.token_to_id(EOS) == vocab_size - 1
    return tok


def wrap_tokenizer(tok: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    # Built from the Tokenizer object (not vocab/merges files): on transformers 5.x the
    # GPT2TokenizerFast(vocab_file=...) path silently yields an empty tokenizer.
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        unk_token=EOS,
        pad_token=EOS,  # GPT-2 has no pad token; padding with eos is the usual convention
        model_max_length=model_max_length,
    )


# --------------------------------------------------------------------------- model


def build_model(args: argparse.Namespace, vocab_size: int, eos_id: int) -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=args.n_positions,
        n_embd=args.n_embd,
        n_layer=args.n_layer,
        n_head=args.n_head,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(args.seed)  # weight init
    return GPT2LMHeadModel(config)


# --------------------------------------------------------------------------- output


def save(model: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerFast, out: Path) -> None:
    # Start from an empty folder so a re-run never leaves stale files behind.
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id  # silences generate()'s pad warning
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    keep = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json"}
    for path in out.iterdir():  # anything else (pickles, training state) is not needed to load
        if path.name not in keep:
            path.unlink()
    shared = REPO_ROOT / "data" / "tokenizers" / "byte-bpe"  # the other families' offline variants use it too
    shared.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(out / name, shared / name)


def write_readme(out: Path, stats: dict, args: argparse.Namespace) -> None:
    train_names, eval_names = split_topic_names()
    text = f"""# gpt2-offline

A tiny GPT-2 (`GPT2LMHeadModel`, {stats['params']:,} parameters, fp32 safetensors) trained from
scratch so the harness has a default model that loads without the HuggingFace Hub.
It is a smoke-test model, not a useful language model.

- Architecture: {args.n_layer} layers, {args.n_head} heads, n_embd {args.n_embd}, n_positions {args.n_positions},
  tied input/output embeddings.
- Tokenizer: byte-level BPE (GPT-2 style, no prefix space), vocab {stats['vocab_size']}; `<|endoftext|>`
  (id {stats['eos_id']}) is bos = eos = unk = pad.
- Training text: CPython's pydoc topics ({len(train_names)} of {len(train_names) + len(eval_names)} topics, minus every paragraph that
  also occurs in a held-out topic) plus `/usr/share/common-licenses/*`: {stats['train_tokens']:,} tokens.
- Training: {args.steps} AdamW steps, batch {args.batch_size} x {args.seq_len} tokens, lr {args.lr} (warm-up + cosine),
  seed {args.seed}, {args.threads} CPU threads (about 10-15 minutes).
- Final training loss (mean of last 100 steps): {stats['train_loss']:.3f}
- Held-out loss / perplexity ({len(eval_names)} held-out pydoc topics, {stats['eval_tokens']:,} tokens,
  non-overlapping {args.seq_len}-token windows): {stats['eval_loss']:.3f} / {stats['eval_ppl']:.1f}
  (a uniform guess over the vocab would be {stats['vocab_size']}).

Rebuild (deterministic; same split as `data/lambada_offline.jsonl`, see `tools/assets/offline_corpus.py`):

    .venv/bin/python tools/assets/make_offline_gpt2.py
"""
    (out / "README.md").write_text(text)


def verify(out: Path, sample_texts: list[str]) -> str:
    """Reload the folder the way users will and check the tokenizer round-trips; return a sample."""
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    for text in sample_texts:
        assert tokenizer.decode(tokenizer.encode(text)) == text, "tokenizer does not round-trip"
    assert tokenizer.eos_token_id == tokenizer.bos_token_id == tokenizer.pad_token_id == model.config.eos_token_id
    assert len(tokenizer) == model.config.vocab_size
    assert folder_bytes(out) <= MAX_FOLDER_BYTES, f"{out} is larger than 12 MB"
    prompt = tokenizer("The for statement", return_tensors="pt")
    generated = model.generate(**prompt, max_new_tokens=40, do_sample=False)
    return tokenizer.decode(generated[0], skip_special_tokens=True)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    train_texts = [text for _, text in train_documents()]
    eval_texts = [text for _, text in eval_documents()]

    tok = train_tokenizer(train_texts, args.vocab_size)
    tokenizer = wrap_tokenizer(tok, args.n_positions)
    eos_id = tok.token_to_id(EOS)
    train_ids = encode_stream(tok, train_texts, eos_id)
    eval_ids = encode_stream(tok, eval_texts, eos_id)
    print(f"tokens: train {len(train_ids):,}, held-out {len(eval_ids):,}")

    model = build_model(args, len(tokenizer), eos_id)
    n_params = sum(p.numel() for p in model.parameters())  # tied weights counted once
    print(f"model: {n_params:,} parameters")

    started = time.time()
    train_loss = train(model, train_ids, eval_ids, args)
    train_minutes = (time.time() - started) / 60
    eval_loss = held_out_loss(model, eval_ids, args.seq_len)

    save(model, tokenizer, args.out)
    stats = {
        "params": n_params, "vocab_size": len(tokenizer), "eos_id": eos_id,
        "train_tokens": len(train_ids), "eval_tokens": len(eval_ids), "train_minutes": train_minutes,
        "train_loss": train_loss, "eval_loss": eval_loss, "eval_ppl": math.exp(eval_loss),
    }
    write_readme(args.out, stats, args)
    # A few held-out paragraphs (short enough for the 256-token context) plus non-ASCII text.
    samples = [text[:600] for text in eval_texts[:3]] + ["naïve café — “quoted” ✓ 東京\n\ttab"]
    sample = verify(args.out, samples)

    print(json.dumps({
        "out": str(args.out), "folder_bytes": folder_bytes(args.out), "params": n_params,
        "train_loss": round(train_loss, 4), "held_out_loss": round(eval_loss, 4),
        "held_out_ppl": round(math.exp(eval_loss), 2), "train_minutes": round(train_minutes, 1),
    }, indent=2))
    print(f"sample (greedy): {sample!r}")


if __name__ == "__main__":
    main()
