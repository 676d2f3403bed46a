#!/usr/bin/env python3
"""Where an onnxrt one-token step's wall time goes beyond its kernels: whether ONNX Runtime's run holds the host,
or the GPU runs the captured graph slower than its kernels' sum (the gaps between the graph's nodes).

    python tools/bench/ort_step_host.py OUT [--shape qwen2.5-0.5b]    # one CUDA machine with onnxruntime-gpu

The shapes model (tools/assets/make_shapes_model.py, made in /tmp/shapes unless there) runs its family's built
graph (`onnxrt --static-cache --use-cuda-graph`, fp16) over a 128-token prompt; then 100 calls each of: the
loop's one-token step (`forward`: the inputs' copies, the per-row lengths, the replay), `OrtGraph.run_bound` (the
replay with its stream waits), ONNX Runtime's `run_with_iobinding` alone on the session's stream, and the same
with the run synchronising at its end (the run options without `disable_synchronize_execution_providers`). Per
form: the host's time inside one call (median, max), the host's time to issue all 100, the wall time and the CUDA
events' time per call. A run that holds the host shows a host time per call near the wall time per call; one that
does not, a wall time per call equal to the replays' own time on the GPU. OUT/ort-step-host-<shape>.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from NNDF.actions.common import backend_steps, open_run  # noqa: E402
from NNDF.options import ModelOptions  # noqa: E402
from tools.bench import speed_matrix as sm  # noqa: E402
from tools.bench.decoder_graphs import family_of  # noqa: E402

PROMPT, BUFFER, CALLS = 128, 1024, 100


def measure(shape: str, workdir: str) -> dict:
    import onnxruntime as ort

    sm.SHAPES[shape] = f"/tmp/shapes/{shape}"
    sm.make_shapes(shape)
    options = ModelOptions(torch_dir=sm.SHAPES[shape], device="cuda", fp16=True, use_cache=True, batch_size=1,
                           working_dir=workdir, static_cache=True, use_cuda_graph=True, fused_decode=True)
    run = open_run(family_of(sm.SHAPES[shape]), options, ("onnxrt",))
    out = {"shape": shape}
    with backend_steps(run, "onnxrt") as (backend, steps):
        out["graph"] = backend.choice
        slot = steps.new_cache(1, BUFFER)
        ids = torch.randint(0, run.source.config.vocab_size, (1, BUFFER), device="cuda")
        positions = torch.arange(BUFFER, device="cuda")[None]
        masks = [torch.ones(1, k + 1, dtype=torch.long, device="cuda") for k in range(BUFFER)]
        steps.forward(ids[:, :PROMPT], masks[PROMPT - 1], positions[:, :PROMPT], slot)
        column = [PROMPT]

        def step():
            k = column[0]
            steps.forward(ids[:, k:k + 1], masks[k], positions[:, k:k + 1], slot)
            column[0] += 1

        for _ in range(5):  # captures the step's graph
            step()
        graph, replay = steps.graph, steps.graph.run_options(slot.graph_id)
        synchronising = ort.RunOptions()
        synchronising.add_run_config_entry("gpu_graph_id", str(slot.graph_id))
        forms = {"forward": (step, None), "run_bound": (lambda: graph.run_bound(slot.binding, replay), None),
                 "run_with_iobinding": (lambda: graph.session.run_with_iobinding(slot.binding, replay), graph.stream),
                 "run_with_iobinding, synchronising":
                     (lambda: graph.session.run_with_iobinding(slot.binding, synchronising), graph.stream)}
        for label, (call, stream) in forms.items():
            with torch.cuda.stream(stream or torch.cuda.current_stream()):
                out[label] = _timed(call)
            print(label, json.dumps({k: round(v, 4) for k, v in out[label].items()}), flush=True)
    return out


def _timed(call) -> dict:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    host = []
    start.record()
    began = time.perf_counter()
    for _ in range(CALLS):
        before = time.perf_counter()
        call()
        host.append(time.perf_counter() - before)
    issued = time.perf_counter()
    end.record()
    torch.cuda.synchronize()
    done = time.perf_counter()
    return {"host_call_ms_median": statistics.median(host) * 1e3, "host_call_ms_max": max(host) * 1e3,
            "issue_ms_per_call": (issued - began) / CALLS * 1e3, "wall_ms_per_call": (done - began) / CALLS * 1e3,
            "event_ms_per_call": start.elapsed_time(end) / CALLS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", default="qwen2.5-0.5b", help="a decoder shape of make_shapes_model.py")
    parser.add_argument("--workdir", default="/tmp/wd-host")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = measure(args.shape, args.workdir)
    (args.out / f"ort-step-host-{args.shape}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
