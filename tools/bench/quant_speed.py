#!/usr/bin/env python3
"""fp32 / int8 / int4 onnxrt speed measured interleaved, for a shared CPU: every round generates once with each
row in turn (fresh random prompt, exactly --new tokens, EOS suppressed, as `benchmark`; --gap seconds idle before
each, so no row starts while the threads of the one before still spin), so a burst of load from other processes
hits every row alike; reports per row the median and the best TPOT, tokens/s as `benchmark`
computes it (new tokens / median end to end, prefill included), and the ratios to the first row: of the medians,
and paired round by round (the first row's end to end / this row's in the same round, whose generations run
within a second of each other, so the machine's drift from round to round cancels: median and quartiles).
`--burst K` runs K generations back to back per row and round and measures all but the first: tokens/s as
`benchmark` defines it (back-to-back calls after a warm-up), still interleaved; with the default 1 every measured
generation starts after --gap seconds idle, with caches an idle machine lost (docs/PERFORMANCE.md).

    python tools/bench/quant_speed.py --torch-dir temp/shapes/gpt2 --rounds 15     # GPT-2 124M shapes, 32 + 64 tokens
    python tools/bench/quant_speed.py --torch-dir temp/shapes/gpt2 --quantize none int4 --quant-block-size 32
    python tools/bench/quant_speed.py --family LLAMA --variant llama-offline    # a family's offline variant
    python tools/bench/quant_speed.py --family LLAMA --variant llama-offline --static-cache
    python tools/bench/quant_speed.py --family LLAMA --variant llama-offline --static-cache --quant-int8-blocks 64
    python tools/bench/quant_speed.py --family LLAMA --variant llama-offline --static-cache --burst 4

`benchmark GPT2 onnxrt --quantize none int8 int4` measures the rows one after the other (and memory), and with
`--interleave` in turns, each timed call warm; this tool adds the ratios paired round by round and generations that
start after the idle gap (the default). Artifacts come from (or go to) --working-dir, as the CLI's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from NNDF.timing import paired_ratio  # noqa: E402  (shared with benchmark --interleave)


def row_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments of the interleaved onnxrt rows (this tool's and `cpu_generation_split.py`'s)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--family", default="GPT2")
    parser.add_argument("--torch-dir", help="a local model folder (or --variant)")
    parser.add_argument("--variant", help="the family's variant (default: its offline default)")
    parser.add_argument("--working-dir", default="temp")
    parser.add_argument("--quantize", nargs="+", default=["none", "int8", "int4"])
    parser.add_argument("--quant-block-size", type=int, default=None)
    parser.add_argument("--quant-int8-blocks", type=int, default=None,
                        help="int8 in 8-bit weight blocks of this many (the CLI's flag), not dynamic")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--gap", type=float, default=0.2,
                        help="seconds idle before each generation, so the row before's spinning threads are asleep")
    parser.add_argument("--burst", type=int, default=1,
                        help="generations back to back per row and round after its idle gap; above 1 the first of "
                             "each burst is a warm-up and the others are measured (`benchmark`'s back-to-back calls, "
                             "interleaved); 1: every generation starts after the gap (a request after a pause)")
    parser.add_argument("--static-cache", action="store_true",
                        help="the static-cache rows (on the CPU: the graph built from the weights, quantized)")
    return parser


def open_rows(args, **device):
    """(run, generation config) of the onnxrt rows `args` name: exactly --new tokens, EOS suppressed; on the CPU
    unless `device` says otherwise (ModelOptions' device and fp16)."""
    from NNDF.actions.common import generation_config, open_run
    from NNDF.backends.onnxrt.options import ORTOptions
    from NNDF.options import ModelOptions, SamplingOptions

    options = ModelOptions(torch_dir=args.torch_dir, variant=args.variant, working_dir=args.working_dir,
                           use_cache=True, static_cache=args.static_cache, **(device or {"cpu": True}))
    run = open_run(args.family, options, ("onnxrt",),
                   ORTOptions(quantize=tuple(args.quantize), quant_block_size=args.quant_block_size,
                              quant_int8_blocks=args.quant_int8_blocks))
    return run, generation_config(run, SamplingOptions(), args.new, min_new_tokens=args.new)


def open_steps(run, stack: ExitStack) -> list[tuple[str, object]]:
    """(row name, steps) of every onnxrt row, open until `stack` closes; torch on one thread, as `backend_steps`
    sets it for onnxrt on the CPU (several are open here)."""
    import torch

    from NNDF.actions.common import backend_rows, backend_steps

    opened = [(name, stack.enter_context(backend_steps(run, row))[1]) for name, row in backend_rows(run, ("onnxrt",))]
    torch.set_num_threads(1)
    return opened


def interleaved(run, config, opened, args, before=lambda name: None):
    """(row name, the generation clock's seconds) of every measured generation: each round runs each row in turn
    (round 0 is the warm-up), --gap seconds idle, then --burst generations back to back (with more than one, the
    first is a warm-up), each after `before(name)` on a fresh random prompt."""
    import torch

    from NNDF.actions.common import generate_prompt
    from NNDF.timing import GenerationClock

    generator = torch.Generator().manual_seed(0)
    burst = args.burst
    for round_ in range(args.rounds + 1):
        for name, steps in opened:
            time.sleep(args.gap)
            for call in range(burst):
                before(name)
                prompt = run.family.task.random_prompt(run, 1, args.prompt, generator)
                clock = GenerationClock(run.device)
                generate_prompt(steps, prompt, config, clock)
                if round_ and (burst == 1 or call):
                    yield name, clock.seconds()


def main() -> None:
    args = row_arguments(__doc__.splitlines()[0]).parse_args()
    run, config = open_rows(args)
    tpot: dict[str, list[float]] = {}
    e2e: dict[str, list[float]] = {}  # per row, round by round (the rows come in the same order every round)
    with ExitStack() as stack:
        for name, times in interleaved(run, config, open_steps(run, stack), args):
            tpot.setdefault(name, []).append((times["e2e"] - times["prefill"]) / (args.new - 1) * 1e3)
            e2e.setdefault(name, []).append(times["e2e"])
    first = statistics.median(next(iter(tpot.values())))
    first_e2e = next(iter(e2e.values()))
    first_rate = args.new / statistics.median(first_e2e)
    burst = "" if args.burst == 1 else f", then {args.burst} generations back to back, the first a warm-up"
    print(f"{args.rounds} interleaved rounds ({args.gap} s idle before each row{burst}), prompt {args.prompt}, "
          f"{args.new} new tokens, batch 1, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print("| row | TPOT p50 ms | TPOT best ms | TPOT vs first row | tokens/s (new / e2e p50) | tokens/s vs first row | "
          "paired vs first row, p50 [p25-p75] |")
    print("|---|---|---|---|---|---|---|")
    for name, values in tpot.items():
        median, rate = statistics.median(values), args.new / statistics.median(e2e[name])
        low, mid, high = paired_ratio(first_e2e, e2e[name])
        print(f"| {name} | {median:.2f} | {min(values):.2f} | {first / median:.2f}x | {rate:.1f} | "
              f"{rate / first_rate:.2f}x | {mid:.2f}x [{low:.2f}-{high:.2f}] |")


if __name__ == "__main__":
    main()
