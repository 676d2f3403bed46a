"""Where a generation's time to the first token goes, after 0.2 s idle: the loop's and the fused steps' functions
wrapped to stamp their entry (>) and exit (<), medians over the rounds of each stamp's ms from the generation's
start, per row. first_token_parts.py --family LLAMA --variant llama-offline --static-cache --rounds 20
--quantize none int4"""
import functools
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import CausalLM.ort_fused as F  # noqa: E402
import NNDF.generation as G  # noqa: E402
from NNDF.actions.common import generate_prompt  # noqa: E402
from NNDF.generation import Observer  # noqa: E402
from tools.bench.quant_speed import open_rows, open_steps, row_arguments  # noqa: E402

args = row_arguments(__doc__.splitlines()[0]).parse_args()
run, config = open_rows(args)
log = []
def wrap(obj, name, label):
    orig = getattr(obj, name)
    @functools.wraps(orig)
    def w(*a, **k):
        log.append((label + ">", time.perf_counter()))
        result = orig(*a, **k)
        log.append((label + "<", time.perf_counter()))
        return result
    setattr(obj, name, w)
wrap(G, "_processors", "processors")
wrap(G, "_EndedRows", "ended")
wrap(G._RunningBatch, "__init__", "batch_init")
wrap(G, "position_ids_from_mask", "positions")
wrap(G._RunningBatch, "prefill", "prefill")
wrap(F.OrtFusedSteps, "new_cache", "new_cache")
wrap(F.OrtFusedSteps, "_prompt", "_prompt")
wrap(F.OrtFusedSteps, "_rows", "_rows")
wrap(F.OrtFusedSteps, "_prompt_binding", "pbinding")
wrap(G, "_greedy_in_step", "in_step")
wrap(G, "pick_tokens", "pick")
class Clock(Observer):
    def first_token(self):
        log.append(("first", time.perf_counter()))
res = {}
with ExitStack() as stack:
    opened = open_steps(run, stack)
    for name, steps in opened:
        wrap(steps.graph, "bind", "bind")
        wrap(steps.graph, "run_bound", "run_bound")
    g = torch.Generator().manual_seed(0)
    for r in range(args.rounds + 1):
        for name, steps in opened:
            time.sleep(args.gap)
            prompt = run.family.task.random_prompt(run, 1, args.prompt, g)
            log.clear(); log.append(("start", time.perf_counter()))
            generate_prompt(steps, prompt, config, Clock())
            first = [i for i, (l, _) in enumerate(log) if l == "first"][0]
            ev = log[:first + 1]
            if r:
                res.setdefault(name, []).append([(l, (t - ev[0][1]) * 1e3) for l, t in ev])
for name, rows in res.items():
    labels = [l for l, _ in rows[0]]
    meds = [statistics.median(r[i][1] for r in rows) for i in range(len(labels))]
    print(name, " ".join(f"{l}@{m:.3f}" for l, m in zip(labels, meds)))
