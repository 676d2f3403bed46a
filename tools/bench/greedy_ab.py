#!/usr/bin/env python3
"""Greedy tokens chosen inside frameworks' static step (`NNDF.generation.GREEDY_IN_STEP`) against the loop choosing
them, on the same steps object, interleaved (each round generates once each way, fresh random prompt):

    python tools/bench/greedy_ab.py GPT2 --variant gpt2-offline --fused-decode          # CPU
    python tools/bench/greedy_ab.py GPT2 --torch-dir temp/shapes/gpt2 --fused-decode --device cuda --fp16 \\
        --use-cuda-graph --torch-compile --prompt 128 --new 128
    python tools/bench/greedy_ab.py T5 --variant t5-offline                             # an encoder-decoder

Exactly --new tokens (EOS forbidden throughout, as `benchmark`), batch 1; reports per way the median and best ms a
token (end to end over the generation, prefill included, divided by --new; the device synchronised before and
after) and whether every round's tokens agree. The first round (capture, compilation) is not counted.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family")
    parser.add_argument("--variant")
    parser.add_argument("--torch-dir")
    parser.add_argument("--working-dir", default="temp")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--fused-decode", action="store_true", help="decoder-only: the family's fused step")
    parser.add_argument("--use-cuda-graph", action="store_true")
    parser.add_argument("--torch-compile", action="store_true")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()

    import torch

    from NNDF import generation, registry
    from NNDF.actions.common import backend_steps, generate_prompt
    from NNDF.context import make_context
    from NNDF.generation import GenerationConfig
    from NNDF.options import ModelOptions

    run = make_context(registry.family(args.family), ModelOptions(
        variant=args.variant, torch_dir=args.torch_dir, working_dir=args.working_dir, device=args.device,
        fp16=args.fp16, use_cache=True, static_cache=True, fused_decode=args.fused_decode or None,
        use_cuda_graph=args.use_cuda_graph, torch_compile=args.torch_compile))
    device = torch.device(args.device)
    config = GenerationConfig(max_new_tokens=args.new, min_new_tokens=args.new,
                              eos_token_id=run.tokenizer.eos_token_id, pad_token_id=0)
    times, tokens, saved = {"loop": [], "step": []}, {"loop": [], "step": []}, generation.GREEDY_IN_STEP
    with backend_steps(run, registry.backend(run.family, "frameworks")) as (_, steps):
        for r in range(args.rounds + 1):
            prompt = run.family.task.random_prompt(run, 1, args.prompt, torch.Generator().manual_seed(r))
            for way in ("loop", "step"):
                generation.GREEDY_IN_STEP = saved | {device.type} if way == "step" else set()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                out = generate_prompt(steps, prompt, config)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                if r:
                    times[way].append((time.perf_counter() - start) / args.new * 1e3)
                    tokens[way].append(out.sequences[:, -args.new:].tolist())
    generation.GREEDY_IN_STEP = saved
    print(f"{run.family.name} {args.variant or args.torch_dir} on {args.device}, {args.rounds} interleaved rounds, "
          f"prompt {args.prompt}, {args.new} new tokens")
    for way, label in (("loop", "the loop chooses"), ("step", "the step chooses")):
        print(f"  {label}: median {statistics.median(times[way]):.4f} ms a token, best {min(times[way]):.4f}")
    print(f"  same tokens in every round: {tokens['loop'] == tokens['step']}")


if __name__ == "__main__":
    main()
