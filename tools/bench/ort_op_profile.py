#!/usr/bin/env python3
"""Where one decode step of an exported decoder graph (or one forward of an encoder graph) spends its time on ONNX
Runtime: ORT's own profiler over N one-token steps (growing-cache graph: past length P), summed per operator type,
plus the total kernel count.

    python3 tools/bench/ort_op_profile.py model.onnx [--past 128] [--steps 20] [--provider CUDAExecutionProvider]
    python3 tools/bench/ort_op_profile.py encoder.onnx --batch 8 --sequence 128 --provider CPUExecutionProvider \
        --threads 2 [--unfused SkipLayerNormFusion]

Inputs are made from the graph's declared inputs: `input_ids` random, `attention_mask` ones, `token_type_ids`
zeros, `position_ids` = P, `past.*` random in the graph's float type, with the dimensions named `past` = P,
`batch` = --batch (1) and `sequence` = --sequence (an encoder's tokens). `--unfused`: ONNX Runtime graph
transformers left out (as `NNDF.backends.onnxrt.steps.CPU_SESSION["unfused"]` does on the CPU). The profile's
first steps (warm-up) are dropped. Prints one line per operator type: share of node time, ms per step, nodes
per step.

With --gpu-kernels (CUDA): the inputs are bound once on the GPU (IO binding, as the onnxrt backend runs) and
torch's profiler (CUPTI, process-wide, so it sees ONNX Runtime's kernels) records every CUDA kernel of the
measured steps: GPU time per step, kernels per step, the wall time per step, and the kernels that take it.
"""
import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tools.bench

FLOATS = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16}


def feeds(model: onnx.ModelProto, past: int, rng: np.random.Generator, batch: int = 1, sequence: int = 1) -> dict:
    sizes = {"batch": batch, "seq": 1, "sequence": sequence, "past": past, "total": past + 1,
             "batch_size": batch, "sequence_length": sequence}  # the last two: Optimum's exports
    out = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        shape = [d.dim_value or sizes[d.dim_param] for d in tensor.shape.dim]
        if value.name == "input_ids":
            out[value.name] = rng.integers(0, 1000, shape, dtype=np.int64)
        elif value.name == "attention_mask":
            out[value.name] = np.ones(shape, np.int64)
        elif value.name == "token_type_ids":
            out[value.name] = np.zeros(shape, np.int64)
        elif value.name == "position_ids":
            out[value.name] = np.full(shape, past, np.int64)
        else:
            out[value.name] = rng.standard_normal(shape).astype(FLOATS[tensor.elem_type])
    return out


def gpu_kernels(session, inputs: dict, warmup: int, steps: int) -> None:
    import time

    import torch
    from tools.bench.kernel_table import kernel_table

    binding = session.io_binding()
    for name, value in inputs.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
    for out in session.get_outputs():
        binding.bind_output(out.name, "cuda")
    for _ in range(warmup):
        session.run_with_iobinding(binding)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        session.run_with_iobinding(binding)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / steps * 1e3
    table = kernel_table(lambda: session.run_with_iobinding(binding), steps, width=70)
    print(f"  wall per step {wall:.3f} ms (IO binding, no profiler); GPU kernel time per step "
          f"{table['us_per_step'] / 1e3:.3f} ms over {table['kernels_per_step']:.0f} kernels")
    for t in table["top"]:
        print(f"  {100 * t['share']:5.1f}%  {t['us_per_step'] / 1e3:7.3f} ms/step  {t['per_step']:4.0f}/step  {t['name']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="an exported decoder graph (model.onnx in a working dir)")
    parser.add_argument("--past", type=int, default=128, help="past length P of the measured steps")
    parser.add_argument("--steps", type=int, default=20, help="measured steps")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the measured ones")
    parser.add_argument("--provider", default="CUDAExecutionProvider",
                        help="ONNX Runtime execution provider (CPUExecutionProvider: a CPU run)")
    parser.add_argument("--gpu-kernels", action="store_true", help="CUDA kernels from torch's profiler instead")
    parser.add_argument("--batch", type=int, default=1, help="the dimension named `batch`")
    parser.add_argument("--sequence", type=int, default=1, help="the dimension named `sequence` (encoders)")
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime's intra-op threads (0: its default)")
    parser.add_argument("--unfused", default="", help="comma-separated ONNX Runtime graph transformers to leave out")
    args = parser.parse_args()
    model = onnx.load(args.model, load_external_data=False)
    inputs = feeds(model, args.past, np.random.default_rng(0), args.batch, args.sequence)
    if args.gpu_kernels:
        print(f"{args.model}: past {args.past}, CUDA kernels")
        session = ort.InferenceSession(args.model, providers=["CUDAExecutionProvider"])
        return gpu_kernels(session, inputs, args.warmup, args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.enable_profiling, options.profile_file_prefix = True, os.path.join(tmp, "profile")
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(args.model, options, providers=[args.provider],
                                       disabled_optimizers=[name for name in args.unfused.split(",") if name])
        for _ in range(args.warmup + args.steps):
            session.run(None, inputs)
        events = json.load(open(session.end_profiling()))
    runs = [e for e in events if e.get("name") == "model_run"]
    start = runs[args.warmup]["ts"]  # events before the first measured run are warm-up
    nodes = [e for e in events if e.get("cat") == "Node" and e["ts"] >= start and e["name"].endswith("_kernel_time")]
    per_op, count = collections.Counter(), collections.Counter()
    for e in nodes:
        per_op[e["args"]["op_name"]] += e["dur"]
        count[e["args"]["op_name"]] += 1
    total = sum(per_op.values())
    run_ms = np.median([r["dur"] for r in runs[args.warmup:]]) / 1e3
    print(f"{args.model}: past {args.past}, {args.provider}; model_run p50 {run_ms:.3f} ms; node time per step "
          f"{total / args.steps / 1e3:.3f} ms over {len(nodes) // args.steps} nodes")
    for op, us in per_op.most_common(15):
        print(f"  {op:24s} {100 * us / total:5.1f}%  {us / args.steps / 1e3:7.3f} ms/step  "
              f"{count[op] // args.steps:4d} nodes/step")


if __name__ == "__main__":
    main()
