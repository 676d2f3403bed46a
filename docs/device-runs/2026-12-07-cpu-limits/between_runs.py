"""Inside a CPU generation: each ONNX Runtime run timed where the session is called, and the host's time between
two consecutive one-token runs (the loop's own work a token), per row, after 0.2 s idle before each generation
(40 generations, the first two runs of each left out). between_runs.py --family LLAMA --variant llama-offline
--static-cache [--quantize none|int8|int4] (quant_speed.py's arguments; the last row is measured)"""
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from NNDF.session import generate_prompt  # noqa: E402
from NNDF.timing import GenerationClock  # noqa: E402
from tools.bench.quant_speed import open_rows, open_steps, row_arguments  # noqa: E402

args = row_arguments(__doc__.splitlines()[0]).parse_args()
run, config = open_rows(args)
stamps = []


class Stamped:
    """The session, its bound runs stamped at their start and end."""

    def __init__(self, session):
        self._session = session

    def run_with_iobinding(self, *a, **k):
        stamps.append(time.perf_counter())
        self._session.run_with_iobinding(*a, **k)
        stamps.append(time.perf_counter())

    def __getattr__(self, name):
        return getattr(self._session, name)


with ExitStack() as stack:
    name, steps = open_steps(run, stack)[-1]
    steps.graph.session = Stamped(steps.graph.session)
    generator = torch.Generator().manual_seed(0)
    inside, between, tpot = [], [], []
    for _ in range(40):
        time.sleep(0.2)
        prompt = run.family.task.random_prompt(run, 1, args.prompt, generator)
        stamps.clear()
        clock = GenerationClock(run.device)
        generate_prompt(steps, prompt, config, clock)
        seconds = clock.seconds()
        tpot.append((seconds["e2e"] - seconds["prefill"]) / (args.new - 1))
        runs = list(zip(stamps[::2], stamps[1::2]))
        inside += [end - start for start, end in runs[2:]]
        between += [runs[i + 1][0] - runs[i][1] for i in range(2, len(runs) - 1)]
print(f"{name}: TPOT {statistics.median(tpot) * 1e6:.1f} us; a one-token run {statistics.median(inside) * 1e6:.1f} us"
      f"; between two runs {statistics.median(between) * 1e6:.1f} us (mean {statistics.mean(between) * 1e6:.1f})")
