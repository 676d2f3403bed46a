#!/usr/bin/env python3
"""Where a CPU generation's time goes, per onnxrt row (fp32 / int8 / int4): the graph's own runs against everything
around them, measured interleaved as `quant_speed.py` measures (fresh random prompt each round, exactly --new
tokens, EOS suppressed, --gap seconds idle before each generation).

    python tools/bench/cpu_generation_split.py --family LLAMA --variant llama-offline --static-cache
    python tools/bench/cpu_generation_split.py --torch-dir temp/shapes/gpt2 --static-cache --rounds 4

Every ONNX Runtime call of a generation is timed where the session is called (the first is the prompt pass, the
others the one-token steps); after the rounds, the last generation's step and prompt pass are each repeated back to
back, which is the graph alone (warm caches, its threads awake). Per row:

- tokens/s: new tokens / median end to end (prefill included), as `benchmark`
- TPOT: (end to end - time to the first token) / (new - 1), median
- step in the loop: the one-token runs inside the generations (median; mean, which carries the first step after
  the prompt pass and any step the machine delayed)
- step alone: the same run repeated back to back (median)
- rest a token: TPOT - the mean step in the loop (token choice, logits processors, the inputs' bookkeeping, and the
  caches the run left cold for them)
- prefill: time to the first token in the generations (median) against the prompt pass repeated back to back
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tools.bench.cpu_roofline import median  # noqa: E402
from tools.bench.quant_speed import interleaved, open_rows, open_steps, row_arguments  # noqa: E402


class TimedSession:
    """An ONNX Runtime session whose runs are timed and remembered (the call, to repeat it)."""

    def __init__(self, session):
        self._session, self.seconds, self.calls = session, [], []

    def _timed(self, method: str, *args, **kwargs):
        start = time.perf_counter()
        out = getattr(self._session, method)(*args, **kwargs)
        self.seconds.append(time.perf_counter() - start)
        self.calls.append((method, args, kwargs))
        return out

    def run(self, *args, **kwargs):
        return self._timed("run", *args, **kwargs)

    def run_with_iobinding(self, *args, **kwargs):
        return self._timed("run_with_iobinding", *args, **kwargs)

    def repeat_last(self, times: int) -> float:
        """Median seconds of the last generation's last step repeated back to back (its inputs are the slot's own
        buffers or arrays the call still holds)."""
        method, args, kwargs = self.calls[-1]
        return back_to_back(lambda: getattr(self._session, method)(*args, **kwargs), times)

    def __getattr__(self, name):
        return getattr(self._session, name)


def back_to_back(call, times: int, gap: float = 0.2) -> float:
    """Median seconds of `call` repeated `times` times after `gap` seconds idle (the threads of the row measured
    before asleep) and 10 unmeasured calls."""
    time.sleep(gap)
    return median(call, times, warmup=10)


def prompt_alone(steps, length: int, max_length: int, vocab: int, times: int) -> float:
    """Median seconds of a prompt pass over `length` random tokens repeated back to back, into a cache of its own
    for `max_length` positions (as the generation's)."""
    import torch

    ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(1))
    mask, positions = torch.ones_like(ids), torch.arange(length)[None]
    cache = steps.new_cache(1, max_length)
    return back_to_back(lambda: steps.forward(ids, mask, positions, cache, last_only=True), times)


def main() -> None:
    parser = row_arguments(__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200, help="back-to-back repetitions of the step alone")
    args = parser.parse_args()

    run, config = open_rows(args)
    samples: dict[str, dict[str, list[float]]] = {}
    with ExitStack() as stack:
        opened = open_steps(run, stack)
        timed = {}
        for name, steps in opened:
            timed[name] = steps.graph.session = TimedSession(steps.graph.session)

        def forget(name: str) -> None:  # each generation's calls on their own
            timed[name].seconds.clear()
            timed[name].calls.clear()

        for name, times in interleaved(run, config, opened, args, before=forget):
            got = samples.setdefault(name, {})
            got.setdefault("e2e", []).append(times["e2e"])
            got.setdefault("prefill", []).append(times["prefill"])
            got.setdefault("tpot", []).append((times["e2e"] - times["prefill"]) / (args.new - 1))
            got.setdefault("steps", []).extend(timed[name].seconds[1:])
        vocab = run.source.config.vocab_size
        alone = {name: (timed[name].repeat_last(args.repeat),
                        prompt_alone(steps, args.prompt, args.prompt + args.new, vocab,
                                     max(args.repeat // 10, 10))) for name, steps in opened}
    print(f"{args.rounds} interleaved rounds ({args.gap} s idle before each), prompt {args.prompt}, {args.new} new "
          f"tokens, batch 1, {'static' if args.static_cache else 'growing'} cache, {os.cpu_count()} CPUs, load "
          f"average {os.getloadavg()[0]:.1f}; ms")
    print("| row | tokens/s | vs first | TPOT | step in the loop p50 / mean | step alone | vs first | rest a token | "
          "prefill in the generation / prompt pass alone |")
    print("|---|---|---|---|---|---|---|---|---|")
    first_rate = first_step = None
    for name, got in samples.items():
        rate = args.new / statistics.median(got["e2e"])
        step, prompt = alone[name]
        first_rate, first_step = first_rate or rate, first_step or step
        tpot, mean_step = statistics.median(got["tpot"]), statistics.mean(got["steps"])
        print(f"| {name} | {rate:.1f} | {rate / first_rate:.2f}x | {tpot * 1e3:.3f} | "
              f"{statistics.median(got['steps']) * 1e3:.3f} / {mean_step * 1e3:.3f} | {step * 1e3:.3f} | "
              f"{first_step / step:.2f}x | {(tpot - mean_step) * 1e3:.3f} | "
              f"{statistics.median(got['prefill']) * 1e3:.2f} / {prompt * 1e3:.2f} |")


if __name__ == "__main__":
    main()
