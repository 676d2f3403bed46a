import sys, time, statistics, os, functools
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))  # the repository root
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from contextlib import ExitStack
from tools.bench.quant_speed import row_arguments, open_rows, open_steps, interleaved
import NNDF.generation as gen, NNDF.timing as T, CausalLM.ort_fused as F, NNDF.backends.onnxrt.steps as S
args = row_arguments("probe").parse_args()
run, config = open_rows(args)
ev = []
def wrap(obj, name, label):
    f = getattr(obj, name)
    @functools.wraps(f)
    def w(*a, **k):
        ev.append((label + ">", time.perf_counter()))
        r = f(*a, **k)
        ev.append((label + "<", time.perf_counter()))
        return r
    setattr(obj, name, w)
wrap(gen, "_greedy_or_sample", "gs")
wrap(gen, "_processors", "proc")
wrap(gen._RunningBatch, "__init__", "init")
wrap(gen._RunningBatch, "prefill", "prefill")
wrap(F.OrtFusedSteps, "_rows", "rows")
wrap(S.OrtGraph, "bind", "bind")
wrap(S.OrtGraph, "run_bound", "runb")
wrap(gen, "pick_tokens", "pick")
wrap(gen, "_greedy_in_step", "gis")
wrap(gen._RunningBatch, "append_greedy", "app")
orig_first = T.GenerationClock.first_token
def first(self):
    ev.append(("first", time.perf_counter())); orig_first(self)
T.GenerationClock.first_token = first
orig_init = T.GenerationClock.__init__
def cinit(self, d):
    orig_init(self, d); ev.append(("start", self.start))
T.GenerationClock.__init__ = cinit
res = {}
with ExitStack() as stack:
    opened = open_steps(run, stack)
    def before(name): ev.clear()
    for name, times in interleaved(run, config, opened, args, before=before):
        start = dict(ev)["start"]
        seen = {}
        for label, t in ev:
            if label in seen or label in ("app>", "app<", "runb>", "runb<") and "first" in seen: continue
            seen[label] = (t - start) * 1e3
        for k, v in seen.items(): res.setdefault(name, {}).setdefault(k, []).append(v)
for name, r in res.items():
    print(name, " ".join(f"{k}={statistics.median(v):.3f}" for k, v in sorted(r.items(), key=lambda kv: statistics.median(kv[1]))))
