#!/usr/bin/env python3
"""What computing the head at the last prompt position saves: each onnxrt row's prompt pass (the fused graph built
from the weights, `--static-cache`) with the logits of every position against the last position's only, the way a
generation's prompt pass runs (`last_only`), on the same graph and the same random prompt; interleaved rounds of
back-to-back passes (median), the rows as `quant_speed.py` opens them.

    python tools/bench/prefill_positions.py --family LLAMA --torch-dir temp/shapes/qwen2.5-0.5b --static-cache \
        --rounds 3 --repeat 5 --new 16
    python tools/bench/prefill_positions.py --family LLAMA --torch-dir temp/shapes/qwen2.5-0.5b --static-cache \
        --cuda --prompt 128 --quantize none       # fp16 on the first GPU, each pass synchronised
"""
from __future__ import annotations

import os
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tools.bench.cpu_generation_split import back_to_back  # noqa: E402
from tools.bench.quant_speed import open_rows, open_steps, row_arguments  # noqa: E402


def main() -> None:
    import torch

    parser = row_arguments(__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="back-to-back passes a round")
    parser.add_argument("--cuda", action="store_true", help="fp16 on the first GPU (the fused graph's CUDA kernels)")
    args = parser.parse_args()
    run, _ = open_rows(args, device="cuda", fp16=True) if args.cuda else open_rows(args)
    device = run.device
    ids = torch.randint(0, run.source.config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    ids, mask, positions = ids.to(device), torch.ones_like(ids).to(device), torch.arange(args.prompt)[None].to(device)

    def prompt_pass(steps, cache, last: bool):
        steps.forward(ids, mask, positions, cache, last_only=last)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    seconds: dict[tuple[str, bool], list[float]] = {}
    with ExitStack() as stack:
        opened = open_steps(run, stack)
        for _ in range(args.rounds):
            for name, steps in opened:
                cache = steps.new_cache(1, args.prompt + args.new)
                for last in (False, True):
                    passed = back_to_back(lambda: prompt_pass(steps, cache, last), args.repeat)
                    seconds.setdefault((name, last), []).append(passed)
    where = torch.cuda.get_device_name(device) + ", fp16" if args.cuda else f"{os.cpu_count()} CPUs, fp32"
    print(f"prompt {args.prompt}, {args.rounds} interleaved rounds of {args.repeat} back-to-back passes (median), "
          f"{where}, load average {os.getloadavg()[0]:.1f}")
    print("| row | every position ms | last position ms | saved |")
    print("|---|---|---|---|")
    for name, _ in opened:
        every, last = (statistics.median(seconds[(name, flag)]) * 1e3 for flag in (False, True))
        print(f"| {name} | {every:.2f} | {last:.2f} | {1 - last / every:.0%} |")


if __name__ == "__main__":
    main()
