"""How long ONNX Runtime's intra-op worker keeps spinning after a generation: the process's CPU time over a window
of 2-100 ms of the main thread's sleep right after a generation (median of 5; 1.0 = one core busy the whole window).
worker_spin.py --family LLAMA --variant llama-offline --static-cache --quantize int4 (quant_speed.py's arguments)"""
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from NNDF.session import generate_prompt  # noqa: E402
from tools.bench.quant_speed import open_rows, open_steps, row_arguments  # noqa: E402

args = row_arguments(__doc__.splitlines()[0]).parse_args()
run, config = open_rows(args)
with ExitStack() as stack:
    name, steps = open_steps(run, stack)[-1]
    generator = torch.Generator().manual_seed(0)
    for window in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1):
        busy = []
        for _ in range(5):
            time.sleep(0.3)
            generate_prompt(steps, run.family.task.random_prompt(run, 1, args.prompt, generator), config)
            start = time.process_time()
            time.sleep(window)
            busy.append((time.process_time() - start) / window)
        print(f"{name}: {window * 1e3:.0f} ms after a generation, process CPU / wall {sorted(busy)[2]:.2f}")
