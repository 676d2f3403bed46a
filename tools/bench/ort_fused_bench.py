#!/usr/bin/env python3
"""One decode step of GPT-2 on ONNX Runtime, three ways, measured through the onnxrt backend's own steps:

    fused    --static-cache --use-cuda-graph --fused-decode (GroupQueryAttention graph, CausalLM/ort_fused.py)
    static   --static-cache --use-cuda-graph               (the torch.onnx export over HF's StaticCache)
    growing  --use-cache                                   (the export with a growing cache, no CUDA graph)

    python tools/bench/ort_fused_bench.py [--out temp/bench/ort-fused] [--models gpt2,gpt2-xl] \\
        [--graphs fused,static,growing] [--batches 1,8]          # CUDA, with onnxruntime-gpu
    python tools/bench/ort_fused_bench.py --cpu --tiny --out temp/fused-bench     # CPU smoke run (gpt2-offline)

Per model (random weights with the published shapes, tools/assets/make_shapes_model.py, made in --shapes-dir), graph
and batch, fp16 on CUDA (fp32 on the CPU), cache length 384: the prefill of a 128-token prompt (median wall
time), the one-token step at past 128.. (wall time per step, synchronised once over --steps steps), and under
torch's profiler (CUPTI sees ONNX Runtime's kernels) the GPU kernel time per step, kernels per step and the top
kernels. Graphs are built (exported, validated) through the harness the first time and cached in --working-dir.
Writes results.json and results.md into --out; progress lines on stdout as it goes.
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

MODES = {"fused": dict(static_cache=True, use_cuda_graph=True, fused_decode=True),
         "static": dict(static_cache=True, use_cuda_graph=True),
         "growing": dict()}
PROMPT, CACHE = 128, 384


def say(line: str) -> None:
    print(line, flush=True)


def model_dir(shape: str, args) -> dict:
    """ModelOptions fields naming the model: the offline gpt2-offline (--tiny), else a shapes folder."""
    if args.tiny:
        return {"variant": "gpt2-offline"}
    folder = Path(args.shapes_dir) / shape
    if not (folder / "config.json").is_file():
        from tools.assets import make_shapes_model

        say(f"making {shape} shapes in {folder}")
        make_shapes_model.gpt2(shape, folder)
    return {"torch_dir": str(folder)}


def open_steps(shape: str, mode: str, args):
    from NNDF import registry
    from NNDF.context import make_context
    from NNDF.options import ModelOptions

    cpu = args.cpu
    flags = dict(MODES[mode], use_cuda_graph=MODES[mode].get("use_cuda_graph", False) and not cpu)
    options = ModelOptions(working_dir=args.working_dir, device="cpu" if cpu else "cuda", fp16=not cpu,
                           use_cache=True, use_mask=True, **flags, **model_dir(shape, args))
    run = make_context(registry.family("GPT2"), options)
    backend = registry.backend(run.family, "onnxrt")
    steps = backend.setup(run)
    run.release_torch_model()
    return run, steps


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill(steps, batch: int, vocab: int, repeats: int):
    """Median wall ms of the 128-token prompt pass on a fresh cache; returns (ms, the last cache, last ids)."""
    import torch

    device, times = steps.device, []
    ids = torch.randint(0, vocab, (batch, PROMPT), device=device)
    mask = torch.ones(batch, PROMPT, dtype=torch.long, device=device)
    positions = torch.arange(PROMPT, device=device).expand(batch, PROMPT)
    for _ in range(repeats):
        cache = steps.new_cache(batch, CACHE)
        sync(device)
        start = time.perf_counter()
        logits, cache = steps.forward(ids, mask, positions, cache, last_only=True)
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), cache, logits[:, -1:].argmax(-1)


class Decoder:
    """One-token steps after the prompt: the mask widens by one column a step (as in generation)."""

    def __init__(self, steps, cache, token, batch: int):
        import torch

        self.steps, self.cache, self.token, self.width = steps, cache, token, PROMPT
        self.mask = torch.ones(batch, CACHE, dtype=torch.long, device=steps.device)

    def step(self) -> None:
        self.width += 1
        positions = torch_full(self.token, self.width - 1)
        logits, self.cache = self.steps.forward(self.token, self.mask[:, : self.width], positions, self.cache,
                                                last_only=True)
        self.token = logits[:, -1:].argmax(-1)


def torch_full(like, value: int):
    import torch

    return torch.full_like(like, value)


def kernels(decoder: Decoder, count: int, top: int) -> dict:
    """GPU kernel time and kernels per step over `count` steps (torch's CUPTI profiler), and the top kernels."""
    from tools.bench.kernel_table import kernel_table

    table = kernel_table(decoder.step, count, top=top)
    return {"gpu_ms_per_step": table["us_per_step"] / 1e3, "kernels_per_step": table["kernels_per_step"],
            "top_kernels": [{"name": t["name"], "ms_per_step": t["us_per_step"] / 1e3, "per_step": t["per_step"],
                             "share": t["share"]} for t in table["top"]]}


def measure(steps, vocab: int, batch: int, args) -> dict:
    prefill_ms, cache, token = prefill(steps, batch, vocab, args.repeats)
    decoder = Decoder(steps, cache, token, batch)
    for _ in range(args.warmup):  # includes the CUDA graph's capture
        decoder.step()
    sync(steps.device)
    start = time.perf_counter()
    for _ in range(args.steps):
        decoder.step()
    sync(steps.device)
    row = {"batch": batch, "prefill_ms": prefill_ms, "step_ms": (time.perf_counter() - start) / args.steps * 1e3,
           "past_from": PROMPT + args.warmup}
    if steps.device.type == "cuda":
        row.update(kernels(decoder, args.profile_steps, args.top))
    return row


def measure_graph(shape: str, mode: str, args, out: Path, header: dict, rows: list) -> None:
    """Every batch size on one graph (built or found once), each row reported and saved as it comes."""
    start = time.perf_counter()
    try:
        run, steps = open_steps(shape, mode, args)
    except Exception as exc:  # noqa: BLE001 - a graph that cannot be built is reported, the rest still run
        rows.append({"model": shape, "graph": mode, "error": f"{type(exc).__name__}: {exc}"})
        say(f"{shape} {mode}: FAILED to set up: {rows[-1]['error'][:300]}")
        return
    say(f"{shape} {mode}: graph ready ({time.perf_counter() - start:.0f} s)")
    try:
        for batch in (int(b) for b in args.batches.split(",")):
            try:
                row = {"model": shape, "graph": mode, **measure(steps, run.source.config.vocab_size, batch, args)}
            except Exception as exc:  # noqa: BLE001 - one failing configuration is reported, the rest still run
                row = {"model": shape, "graph": mode, "batch": batch, "error": f"{type(exc).__name__}: {exc}"}
                say(f"{shape} {mode} b{batch}: FAILED {row['error'][:300]}")
            else:
                gpu = (f", GPU {row['gpu_ms_per_step']:.3f} ms over {row['kernels_per_step']:.0f} kernels"
                       if "gpu_ms_per_step" in row else "")
                say(f"{shape} {mode} b{batch}: step {row['step_ms']:.3f} ms{gpu}, prefill {row['prefill_ms']:.2f} ms")
            rows.append(row)
            (out / "results.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    finally:
        steps.close()


def markdown(rows: list[dict], header: dict) -> str:
    lines = [f"# ORT decode step: fused vs static vs growing ({header['device']})", "",
             f"onnxruntime {header['onnxruntime']}, torch {header['torch']}; prompt {PROMPT}, cache {CACHE}, "
             f"{header['precision']}; step = wall ms per one-token step over {header['steps']} steps", "",
             "| model | graph | batch | step ms | GPU ms/step | kernels/step | prefill 128 ms |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        gpu = f"{r['gpu_ms_per_step']:.3f}" if "gpu_ms_per_step" in r else "-"
        count = f"{r['kernels_per_step']:.0f}" if "kernels_per_step" in r else "-"
        lines.append(f"| {r['model']} | {r['graph']} | {r['batch']} | {r['step_ms']:.3f} | {gpu} | {count} | "
                     f"{r['prefill_ms']:.2f} |")
    for r in rows:
        if r.get("top_kernels"):
            lines += ["", f"## {r['model']} {r['graph']} batch {r['batch']}: top kernels", "",
                      "| share | ms/step | per step | kernel |", "|---:|---:|---:|---|"]
            lines += [f"| {100 * k['share']:.1f}% | {k['ms_per_step']:.4f} | {k['per_step']:.0f} | `{k['name']}` |"
                      for k in r["top_kernels"]]
    return "\n".join(lines) + "\n"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "temp" / "bench" / "ort-fused"),
                        help="folder for results.json and results.md (default temp/bench/ort-fused)")
    parser.add_argument("--models", default="gpt2,gpt2-xl", help="comma-separated shapes (make_shapes_model.py)")
    parser.add_argument("--graphs", default="fused,static,growing", help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--steps", type=int, default=100, help="timed one-token steps")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--profile-steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5, help="prefill passes (median)")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--working-dir", default=str(ROOT / "temp"))
    parser.add_argument("--shapes-dir", default=str(ROOT / "temp" / "shapes"))
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (fp32): a smoke test of the script")
    parser.add_argument("--tiny", action="store_true", help="gpt2-offline instead of the --models shapes")
    args = parser.parse_args()
    bad = [g for g in args.graphs.split(",") if g not in MODES]
    if bad:
        parser.error(f"--graphs: unknown {', '.join(bad)} (choose from {', '.join(MODES)})")
    if PROMPT + args.warmup + args.steps + args.profile_steps > CACHE:
        parser.error(f"--warmup + --steps + --profile-steps must fit the cache: at most {CACHE - PROMPT}")
    return args


def main() -> None:
    args = parse()
    import onnxruntime
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.cpu else torch.cuda.get_device_name(0)
    header = {"device": device, "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
              "precision": "fp32" if args.cpu else "fp16", "steps": args.steps, "prompt": PROMPT, "cache": CACHE}
    rows = []
    models = ["gpt2-offline"] if args.tiny else args.models.split(",")
    for shape in models:
        for mode in args.graphs.split(","):
            measure_graph(shape, mode, args, out, header, rows)
    (out / "results.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    (out / "results.md").write_text(markdown([r for r in rows if "error" not in r], header))
    say(f"wrote {out / 'results.json'} and {out / 'results.md'}")
    if any("error" in r for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
