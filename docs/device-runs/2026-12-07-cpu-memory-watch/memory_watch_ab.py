"""Generations inside `MemoryWatch` on the CPU with the peak read from the kernel's high-water mark (`mark`) and with
a thread sampling the RSS every 2 ms (`sampled`, as before), alternated generation by generation in one process on
the same sessions, 0.2 s idle before each: median TPOT and tokens/s per row and way, and the paired ratio.
memory_watch_ab.py --family LLAMA --variant llama-offline --static-cache --rounds 20"""
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import NNDF.timing as timing  # noqa: E402
from NNDF.actions.common import generate_prompt  # noqa: E402
from tools.bench.quant_speed import open_rows, open_steps, paired_ratio, row_arguments  # noqa: E402

args = row_arguments(__doc__.splitlines()[0]).parse_args()
run, config = open_rows(args)
real = timing._CLEAR_REFS
e2e, tpot = {}, {}
with ExitStack() as stack:
    opened = open_steps(run, stack)
    generator = torch.Generator().manual_seed(0)
    for round_ in range(args.rounds + 1):
        ways = ("mark", "sampled") if round_ % 2 else ("sampled", "mark")
        for name, steps in opened:
            for way in ways:
                timing._CLEAR_REFS = real if way == "mark" else "/nonexistent/clear_refs"
                time.sleep(args.gap)
                prompt = run.family.task.random_prompt(run, 1, args.prompt, generator)
                with timing.MemoryWatch(run.device) as watch:
                    clock = timing.GenerationClock(run.device)
                    generate_prompt(steps, prompt, config, clock)
                assert (watch.kind == timing.MemoryWatch.SAMPLED) == (way == "sampled")
                if round_:
                    seconds = clock.seconds()
                    e2e.setdefault((name, way), []).append(seconds["e2e"])
                    tpot.setdefault((name, way), []).append(
                        (seconds["e2e"] - seconds["prefill"]) / (args.new - 1) * 1e3)
print(f"{args.rounds} rounds, prompt {args.prompt}, {args.new} new, {args.gap} s idle before each, "
      f"load average {os.getloadavg()[0]:.1f}")
for name, _ in opened:
    rates = {way: args.new / statistics.median(e2e[name, way]) for way in ("mark", "sampled")}
    low, mid, high = paired_ratio(e2e[name, "sampled"], e2e[name, "mark"])
    print(f"{name}: TPOT mark {statistics.median(tpot[name, 'mark']):.3f} ms, sampled "
          f"{statistics.median(tpot[name, 'sampled']):.3f} ms; tokens/s mark {rates['mark']:.0f}, sampled "
          f"{rates['sampled']:.0f}; mark's tokens/s over sampled's, paired: {mid:.3f}x [{low:.3f}-{high:.3f}]")
