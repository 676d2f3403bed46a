#!/usr/bin/env python3
"""GPU time of one captured decode step: HF's compiled static-cache step vs GPT-2's fused step (--fused-decode).

    python tools/bench/fused_step_bench.py [OUT_DIR]                # CUDA: GPT-2 124M and gpt2-xl shapes, fp16
    python tools/bench/fused_step_bench.py [OUT_DIR] --cpu --tiny   # the same code end to end on a CPU, in seconds

For each shape (random weights, `tools/assets/make_shapes_model.py`'s configs), rows 1 and 8 and a cache of 384 columns
(a 128-token prompt written by the prompt pass), each variant's one-token step is built through
`CausalLM.torch_steps.TorchSteps` (the backend's own capture), compiled and captured, then replayed:
GPU time per replay (CUDA events, median of --replays after warm-up), kernels per step and the top kernels by
time (torch.profiler, CUDA activity, a few replays), weight bytes / time, compile + capture time, and the step's
max |logits - HF eager| on the same tokens; and the 128-token prompt pass (eager) of both. Variants: `hf`
(HF's model over its StaticCache, compiled with inductor's defaults) and `fused-[fold-]<attention>-<tuning>`
(`GPT2.fused_decode`: one-query attention `reduction` or `sdpa`, layer norms folded into the next product or
not, inductor defaults or coordinate-descent tuning); the default list runs hf, the fused step as
`--fused-decode --torch-compile` runs it (fused-reduction-default) and fused-sdpa-coordinate.
Variants left when --budget-s runs out are recorded as skipped. Writes OUT_DIR (default temp/bench/fused-step)
/fused_step_bench.json and .md; progress on stdout.
With --cpu (a plumbing check): no CUDA graph, wall-clock time per step, CPU operators instead of kernels.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROMPT, LENGTH = 128, 384
COORDINATE = {"coordinate_descent_tuning": True}
# name -> (FusedSettings fields, or None for HF's own step; inductor options, None: eager)
VARIANTS = {
    "hf": (None, {}),
    "fused-reduction-default": (dict(attention="reduction"), {}),
    "fused-sdpa-default": (dict(attention="sdpa"), {}),
    "fused-reduction-coordinate": (dict(attention="reduction"), COORDINATE),
    "fused-sdpa-coordinate": (dict(attention="sdpa"), COORDINATE),
    "fused-fold-reduction-default": (dict(attention="reduction", fold_norms=True), {}),
    "fused-fold-reduction-coordinate": (dict(attention="reduction", fold_norms=True), COORDINATE),
    "fused-fold-sdpa-coordinate": (dict(attention="sdpa", fold_norms=True), COORDINATE),
}
# HF's step, the fused step's defaults and the best variant measured (sdpa-coordinate); the fold variants and the
# other variants measured no faster (docs/PERFORMANCE.md)
DEFAULT_VARIANTS = ["hf", "fused-reduction-default", "fused-sdpa-coordinate"]
TINY = dict(n_layer=2, n_embd=64, n_head=4)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def make_model(shape: str, tiny: bool, device, dtype):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from tools.assets.make_shapes_model import SHAPES

    sizes = TINY if tiny else SHAPES[shape]
    vocab = 1000 if tiny else 50257
    config = GPT2Config(vocab_size=vocab, n_positions=1024, bos_token_id=vocab - 1, eos_token_id=vocab - 1, **sizes)
    torch.manual_seed(0)
    with torch.device(device):
        model = GPT2LMHeadModel(config)
    return model.to(dtype).eval()


def weight_bytes(model) -> int:
    """Bytes a step reads of the weights: every parameter once (the tied LM head once), one row of wpe."""
    params = {p.data_ptr(): p for p in model.parameters()}.values()
    wpe = model.transformer.wpe.weight
    return sum(p.numel() * p.element_size() for p in params) - wpe.numel() * wpe.element_size()


def build_steps(model, variant: str, cuda: bool):
    from GPT2.fused_decode import FusedGPT2Step, FusedSettings
    from CausalLM.torch_steps import TorchSteps

    settings, options = VARIANTS[variant]
    fused = None if settings is None else FusedGPT2Step(model, options, FusedSettings(**settings))
    return TorchSteps(model, True, static_cache=True, cuda_graph=cuda, compile_mode="default", fused=fused)


def inputs(rows: int, vocab: int, device):
    import torch

    generator = torch.Generator().manual_seed(rows)
    ids = torch.randint(0, vocab, (rows, PROMPT + 1), generator=generator).to(device)
    return ids[:, :PROMPT], ids[:, PROMPT:]


def first_step(steps, prompt, token, sync):
    """Prompt pass, then the first one-token step (compiles and, on CUDA, captures): its logits and seconds."""
    import torch

    rows, device = prompt.shape[0], prompt.device
    slot = steps.new_cache(rows, LENGTH)
    positions = torch.arange(PROMPT, device=device).expand(rows, PROMPT)
    steps.forward(prompt, torch.ones_like(prompt), positions, slot, last_only=True)
    sync()
    start = time.perf_counter()
    mask = torch.ones(rows, PROMPT + 1, dtype=torch.long, device=device)
    logits, slot = steps.forward(token, mask, torch.full((rows, 1), PROMPT, device=device), slot, last_only=True)
    sync()
    return slot, logits[:, -1].float().clone(), time.perf_counter() - start


def time_replays(replay, replays: int, cuda: bool) -> float:
    """Median milliseconds of one step (CUDA events around each replay; wall clock on the CPU)."""
    import torch

    for _ in range(max(3, replays // 10)):
        replay()
    times = []
    for _ in range(replays):
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            replay()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end))
        else:
            start = time.perf_counter()
            replay()
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def profile_kernels(replay, cuda: bool, replays: int = 5, top: int = 5):
    """(kernels per step, [(name, microseconds per step)] of the `top` kernels by time); CPU: operators."""
    from tools.bench.kernel_table import kernel_table

    table = kernel_table(replay, replays, cuda=cuda, top=top)
    return table["kernels_per_step"], [(t["name"], round(t["us_per_step"], 2)) for t in table["top"]]


def run_variant(model, variant: str, rows: int, args, reference) -> dict:
    import torch

    cuda = not args.cpu
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch._dynamo.reset()  # each variant compiles from scratch: its compile time is its own, no recompile limit
    steps = build_steps(model, variant, cuda)
    try:
        prompt, token = inputs(rows, model.config.vocab_size, model.device)
        slot, logits, compile_s = first_step(steps, prompt, token, sync)

        @torch.inference_mode()
        def replay():
            slot.graph.replay() if cuda else steps._one_token(slot)

        ms = time_replays(replay, args.replays, cuda)
        kernels, top = profile_kernels(replay, cuda, top=args.top)
    finally:
        steps.close()
    gbps = weight_bytes(model) / (ms * 1e-3) / 1e9
    return dict(status="ok", ms_per_step=round(ms, 4), kernels_per_step=kernels,
                top_kernels=top, weight_gb_per_s=round(gbps, 1), compile_capture_s=round(compile_s, 1),
                max_abs_diff_vs_hf_eager=round((logits - reference).abs().max().item(), 5))


def eager_reference(model, rows: int):
    """HF eager logits of the step's token after the prompt (the same inputs every variant sees)."""
    import torch

    prompt, token = inputs(rows, model.config.vocab_size, model.device)
    with torch.inference_mode():
        return model(input_ids=torch.cat([prompt, token], dim=1)).logits[:, -1].float()


def time_prefill(model, rows: int, fused: bool, args) -> float:
    """Median ms of the 128-token prompt pass (eager, last position's logits): HF's model writing its
    StaticCache (today's --static-cache prompt pass) or the fused step's own prompt pass."""
    import torch

    from GPT2.fused_decode import FusedGPT2Step
    from CausalLM.torch_steps import TorchSteps

    steps = TorchSteps(model, True, static_cache=True, fused=FusedGPT2Step(model) if fused else None)
    try:
        prompt, _ = inputs(rows, model.config.vocab_size, model.device)
        mask = torch.ones_like(prompt)
        positions = torch.arange(PROMPT, device=prompt.device).expand(rows, PROMPT)
        slot = steps.new_cache(rows, LENGTH)

        @torch.inference_mode()  # the slot's tensors are inference tensors
        def prompt_pass():
            steps.forward(prompt, mask, positions, slot.reset(), last_only=True)

        return time_replays(prompt_pass, max(3, args.replays // 10), not args.cpu)
    finally:
        steps.close()


def prefill_rows(models: dict, args) -> list[dict]:
    out = []
    for rows in args.rows:
        for shape, model in models.items():
            row = dict(shape=shape, rows=rows, prompt=PROMPT, hf_ms=round(time_prefill(model, rows, False, args), 4),
                       fused_ms=round(time_prefill(model, rows, True, args), 4))
            log(f"prefill {json.dumps(row)}")
            out.append(row)
    return out


def run(args) -> list[dict]:
    import torch

    device, dtype = ("cpu", torch.float32) if args.cpu else ("cuda", torch.float16)
    models = {shape: make_model(shape, args.tiny, device, dtype) for shape in args.shapes}
    for shape, model in models.items():
        log(f"{shape}: {weight_bytes(model) / 1e9:.3f} GB of weights per step, {dtype}, {device}")
    results, start = [], time.monotonic()
    args.prefill = prefill_rows(models, args) if args.prefill else []
    for rows in args.rows:  # rows 1 of every shape first: what matters most if the budget runs out
        for shape, model in models.items():
            reference = eager_reference(model, rows)
            for variant in args.variants:
                row = dict(shape=shape, rows=rows, variant=variant)
                if time.monotonic() - start > args.budget_s:
                    results.append(dict(row, status=f"skipped: --budget-s {args.budget_s} spent"))
                    log(f"{shape} rows={rows} {variant}: skipped (budget)")
                    continue
                try:
                    row.update(run_variant(model, variant, rows, args, reference))
                except Exception as exc:  # noqa: BLE001 - one variant failing must not lose the others' numbers
                    row.update(status=f"failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
                results.append(row)
                log(f"{shape} rows={rows} {variant}: " + json.dumps({k: v for k, v in row.items()
                                                                      if k not in ("shape", "rows", "variant")}))
    return results


def environment(args) -> dict:
    import torch
    import transformers

    device = "cpu" if args.cpu else torch.cuda.get_device_name(0)
    return dict(device=device, torch=torch.__version__, transformers=transformers.__version__,
                dtype="float32" if args.cpu else "float16", prompt=PROMPT, cache_length=LENGTH,
                replays=args.replays, tiny=args.tiny)


def table(env: dict, results: list[dict]) -> str:
    unit = "ms/step (wall)" if env["dtype"] == "float32" else "GPU ms/step"
    lines = [f"{env['device']}, torch {env['torch']}, transformers {env['transformers']}, {env['dtype']}, "
             f"prompt {PROMPT}, cache {LENGTH}, median of {env['replays']} replays" + (" (tiny model)" if env["tiny"]
                                                                                       else ""), "",
             f"| shape | rows | variant | {unit} | kernels/step | weight GB/s | compile+capture s | max diff | "
             "top kernels (us/step) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r["status"] != "ok":
            lines.append(f"| {r['shape']} | {r['rows']} | {r['variant']} | {r['status']} | | | | | |")
            continue
        top = "<br>".join(f"{name} {us}" for name, us in r["top_kernels"][:3])
        lines.append(f"| {r['shape']} | {r['rows']} | {r['variant']} | {r['ms_per_step']} | "
                     f"{r['kernels_per_step']:.0f} | {r['weight_gb_per_s']} | {r['compile_capture_s']} | "
                     f"{r['max_abs_diff_vs_hf_eager']} | {top} |")
    lines += ["", f"Prompt pass ({PROMPT} tokens, eager, median ms): HF's model over its StaticCache vs the fused "
              "step's own", "", "| shape | rows | HF ms | fused ms |", "|---|---|---|---|"]
    lines += [f"| {r['shape']} | {r['rows']} | {r['hf_ms']} | {r['fused_ms']} |" for r in env.get("prefill", [])]
    return "\n".join(lines) + "\n"


def write(out: Path, env: dict, results: list[dict]) -> None:
    from NNDF.artifacts import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "fused_step_bench.json", dict(environment=env, results=results))
    partial = out / "fused_step_bench.md.partial"
    partial.write_text(table(env, results))
    os.replace(partial, out / "fused_step_bench.md")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", default=ROOT / "temp" / "bench" / "fused-step",
                        help="folder for fused_step_bench.json and .md (default temp/bench/fused-step)")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU in fp32 (no CUDA graph): a plumbing check")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer 64-wide model instead of the real shapes")
    parser.add_argument("--shapes", nargs="+", default=["gpt2", "gpt2-xl"], choices=["gpt2", "gpt2-medium",
                                                                                     "gpt2-large", "gpt2-xl"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    parser.add_argument("--replays", type=int, default=None, help="timed replays (default 200; 5 with --tiny)")
    parser.add_argument("--top", type=int, default=5, help="kernels listed per variant in the JSON (by time)")
    parser.add_argument("--no-prefill", dest="prefill", action="store_false", help="skip the prompt-pass timing")
    parser.add_argument("--budget-s", type=float, default=270.0, help="start no variant after this many seconds")
    args = parser.parse_args(argv)
    args.replays = args.replays or (5 if args.tiny else 200)
    if not args.cpu:
        import torch

        if not torch.cuda.is_available():
            parser.error("torch sees no CUDA GPU: add --cpu (with --tiny) for the CPU check")
    env = environment(args)
    log(f"fused step bench: {json.dumps(env)}")
    results = run(args)
    env["prefill"] = args.prefill
    write(args.out, env, results)
    log(f"wrote {args.out / 'fused_step_bench.json'} and {args.out / 'fused_step_bench.md'}")
    return 0 if all(r["status"] == "ok" or r["status"].startswith("skipped") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
