import sys, os, statistics
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))  # the repository root
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from contextlib import ExitStack
import NNDF.backends.onnxrt.steps as S
from tools.bench.quant_speed import row_arguments, open_rows, open_steps, interleaved
p = row_arguments("spin"); p.add_argument("--settings", nargs="+", default=["spinning=1", "spin_us=20"])
args = p.parse_args()
run, config = open_rows(args)
res = {}
with ExitStack() as stack:
    opened = []
    for setting in args.settings:
        k, v = setting.split("=")
        saved = dict(S.CPU_SESSION); S.CPU_SESSION[k] = v
        opened += [(f"{setting} {name}", steps) for name, steps in open_steps(run, stack)]
        S.CPU_SESSION.clear(); S.CPU_SESSION.update(saved)
    for name, t in interleaved(run, config, opened, args):
        res.setdefault(name, []).append(t["e2e"])
for name, v in res.items():
    print(f"{name:30s} {args.new / statistics.median(v):8.1f} tokens/s")
