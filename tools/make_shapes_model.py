#!/usr/bin/env python3
"""Build a random-weight HF folder with the shapes of a real model, for benchmarks without the Hub.

    python tools/make_shapes_model.py gpt2 temp/shapes/gpt2          # GPT-2 124M shapes
    python tools/make_shapes_model.py gpt2-xl temp/shapes/gpt2-xl    # GPT-2 XL (1.56B) shapes

Weights use HF's default init (speed does not depend on values); the tokenizer is the offline one from
GPT2/offline/gpt2-offline (benchmarks feed random token ids, the tokenizer only supplies EOS / pad ids).
Run it as `benchmark GPT2 ... --torch-dir <folder>`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = {  # GPT-2 sizes from the published configs
    "gpt2": dict(n_layer=12, n_embd=768, n_head=12),
    "gpt2-medium": dict(n_layer=24, n_embd=1024, n_head=16),
    "gpt2-large": dict(n_layer=36, n_embd=1280, n_head=20),
    "gpt2-xl": dict(n_layer=48, n_embd=1600, n_head=25),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from NNDF.offline import SHARED_TOKENIZERS
    OFFLINE_TOKENIZER_DIR = SHARED_TOKENIZERS / "byte-bpe"

    tok = AutoTokenizer.from_pretrained(OFFLINE_TOKENIZER_DIR, local_files_only=True)
    eos = tok.eos_token_id
    config = GPT2Config(vocab_size=50257, n_positions=1024, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                        **SHAPES[args.shape])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    print(f"{args.shape}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {args.out}")


if __name__ == "__main__":
    main()
