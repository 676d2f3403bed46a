"""The host's work before and after a fused graph's prompt pass, step by step as `generate` and
`OrtFusedSteps._rows` do it for an unpadded prompt, after 5 ms and after 0.2 s idle (median of 30 each, ms).
first_token_host.py --family LLAMA --variant llama-offline --static-cache --quantize int4 (the last row)"""
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from NNDF.steps import position_ids_from_mask  # noqa: E402
from tools.bench.quant_speed import open_rows, open_steps, row_arguments  # noqa: E402

args = row_arguments(__doc__.splitlines()[0]).parse_args()
run, config = open_rows(args)
with ExitStack() as stack:
    name, steps = open_steps(run, stack)[-1]
    generator = torch.Generator().manual_seed(0)
    results, labels = {}, []
    for gap in (0.005, 0.2):
        for round_ in range(31):
            time.sleep(gap)
            prompt = run.family.task.random_prompt(run, 1, args.prompt, generator)
            ids, mask = prompt.input_ids, prompt.attention_mask
            stamps, labels = [time.perf_counter()], []

            def mark(label):
                stamps.append(time.perf_counter())
                labels.append(label)

            rows, length = ids.shape
            buffer = ids.new_full((rows, length + args.new), 0)
            mark("ids buffer")
            buffer[:, :length] = ids
            view = buffer.numpy()
            mark("ids copied, numpy view")
            full = mask.new_ones(rows, length + args.new)
            full[:, :length] = mask
            mark("mask buffer")
            positions = position_ids_from_mask(mask)
            following = positions[:, -1:] + 1
            mark("positions")
            cache = steps.new_cache(rows, length + args.new)
            unpadded = bool(full[:, :length].all())
            mark("slot, mask.all")
            cache.inputs["seqlens_k"][slice(None)].fill_(length - 1)
            binding, scalars = steps._prompt_binding(cache)
            scalars["total_sequence_length"].fill_(length)
            scalars["logits_start"].fill_(-1)
            mark("lengths and scalars")
            steps.graph.bind({"input_ids": buffer[:, :length].contiguous(), "position_ids": positions.contiguous()},
                             {"logits": cache.logits}, binding)
            mark("bind")
            steps.graph.run_bound(binding, None)
            mark("RUN")
            logits = cache.logits[:, -1, :].float()
            mark("last logits")
            if round_:
                results.setdefault(gap, []).append([b - a for a, b in zip(stamps, stamps[1:])])
    print(name)
    for gap, samples in results.items():
        print(f"{gap} s idle: " + ", ".join(f"{label} {statistics.median(c) * 1e3:.3f}"
                                            for label, c in zip(labels, zip(*samples))))
