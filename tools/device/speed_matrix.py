#!/usr/bin/env python3
"""The GPU speed matrix (run by tools/device/speed_check.sh in one device call): fp16 benchmarks of every
configuration on GPT-2 124M and gpt2-xl shapes (random weights, tools/make_shapes_model.py) and the families'
offline defaults, plus a token check of each optimised configuration against the same backend's plain path.

Configurations (each a `run.py benchmark` option set, run in-process through NNDF.actions.benchmark):
  eager         growing KV cache; HF `generate` (eager) timed beside it
  static-graph  --static-cache --use-cuda-graph; HF `generate` with its own static cache beside it
  compiled      --static-cache --use-cuda-graph --torch-compile (frameworks only)
Writes OUT/speed-GROUP.json (every row, environment, anchors), OUT/speed-GROUP.md (the table) and per-token
plots (OUT/per_token_MODEL_b1.png).

    python3 tools/device/speed_matrix.py OUT [--group quick|gpt2|xl|all]   # quick: GPT-2 124M at batch 1
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from NNDF.actions.benchmark import benchmark  # noqa: E402
from NNDF.actions.common import backend_steps, generate_prompt, open_run  # noqa: E402
from NNDF.generation import GenerationConfig  # noqa: E402
from NNDF.options import BenchmarkOptions, ModelOptions, SamplingOptions, TimingOptions  # noqa: E402
from NNDF.plot import plot_per_token  # noqa: E402
from NNDF.results import environment  # noqa: E402
from NNDF.tasks import Prompt  # noqa: E402

# ../shared/device/README.md (H200, fp16, batch 1, prompt 128, 256 new tokens): per-token ms
ANCHORS = {"gpt2": {"floor": 0.059, "hf eager": 4.40, "hf static": 2.83, "ORT IO-binding loop": 1.93},
           "gpt2-xl": {"floor": 0.73, "hf eager": 14.2}}
CONFIGS = {
    "eager": dict(backends=("frameworks", "onnxrt"), options={}),
    "static-graph": dict(backends=("frameworks", "onnxrt"), options=dict(static_cache=True, use_cuda_graph=True)),
    "compiled": dict(backends=("frameworks",), options=dict(static_cache=True, use_cuda_graph=True, torch_compile=True)),
}
PROMPT, NEW = 128, 256
SHAPES = {"gpt2": "/tmp/shapes/gpt2", "gpt2-xl": "/tmp/shapes/gpt2-xl"}


def models(group: str):
    """(label, family, torch_dir or None, batches, configs) of a group: quick, gpt2 (124M shapes at batch 1 and
    8, and the families' offline defaults), xl (gpt2-xl shapes at batch 1), or all."""
    if group == "quick":
        return [("gpt2", "GPT2", SHAPES["gpt2"], (1,), tuple(CONFIGS))]
    out = []
    if group in ("gpt2", "all"):
        out.append(("gpt2", "GPT2", SHAPES["gpt2"], (1, 8), tuple(CONFIGS)))
        for family in ("GPT2", "OPT", "BLOOM"):
            out.append((f"{family} offline default", family, None, (1,), ("eager", "static-graph")))
        for family in ("T5", "BART", "BLIP"):  # encoder-decoder caches stay dynamic
            out.append((f"{family} offline default", family, None, (1,), ("eager",)))
    if group in ("xl", "all"):
        out.append(("gpt2-xl", "GPT2", SHAPES["gpt2-xl"], (1,), tuple(CONFIGS)))
    return out


DEVICE = "cuda"  # --device cpu: a smoke test of this script (fp32; the CUDA-graph configurations are refused)


def options(torch_dir, batch, extra, workdir) -> ModelOptions:
    return ModelOptions(torch_dir=torch_dir, device=DEVICE, fp16=DEVICE == "cuda", use_cache=True, batch_size=batch,
                        working_dir=workdir, **extra)


def bench_rows(label, family, torch_dir, batch, config, workdir, iterations):
    spec = CONFIGS[config]
    hf = config != "compiled"
    report = benchmark(family, spec["backends"], options(torch_dir, batch, spec["options"], workdir),
                       SamplingOptions(), TimingOptions(iterations=iterations, warmup=2),
                       BenchmarkOptions(input_seq_len=PROMPT, output_seq_len=NEW, hf_baseline=hf))
    rows = []
    for r in report.results:
        rows.append({"model": label, "batch": batch, "config": config, "backend": r.backend,
                     "prefill_p50_ms": r.prefill_ms.p50, "prefill_p90_ms": r.prefill_ms.p90,
                     "tpot_p50_ms": r.tpot_ms.p50, "tpot_p90_ms": r.tpot_ms.p90, "tokens_per_s": r.tokens_per_s,
                     "peak_mib": r.peak_memory_mb, "onnx_max_diff": r.onnx_max_diff})
    return rows, report


def traced(label, family, torch_dir, config, workdir):
    """One traced run per backend (synchronised after each token) for the per-token plot."""
    spec = CONFIGS[config]
    report = benchmark(family, spec["backends"], options(torch_dir, 1, spec["options"], workdir), SamplingOptions(),
                       TimingOptions(iterations=1, warmup=1), BenchmarkOptions(PROMPT, NEW, plot="/tmp/ignored.png"))
    return report.results


def same_tokens(family, torch_dir, batch, config, workdir, new=128):
    """Greedy tokens of each backend under `config` against the same backend's static cache without CUDA graph
    (and compilation), and that against the plain growing cache (same random prompts): the index of the first
    difference per row, or None when equal. fp16 sums in another order (a full-length masked attention) may
    flip a near tie on random weights; the graph must replay its uncaptured step exactly."""
    out = {}
    gen = torch.Generator().manual_seed(1)
    for backend in CONFIGS[config]["backends"]:
        tokens = []
        for extra in (CONFIGS[config]["options"], dict(static_cache=True), {}):
            run = open_run(family, options(torch_dir, batch, extra, workdir), (backend,))
            ids = torch.randint(0, run.source.config.vocab_size, (batch, PROMPT), generator=gen.manual_seed(1))
            prompt = Prompt(ids.to(run.device), torch.ones_like(ids).to(run.device))
            config_ = GenerationConfig(max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
            with backend_steps(run, backend) as (_, steps):
                tokens.append(generate_prompt(steps, prompt, config_).sequences[:, PROMPT:].cpu())
        def first(a, b):
            return [None if (x == y).all() else int((x != y).nonzero()[0]) for x, y in zip(a, b)]

        out[backend] = {"graph_vs_static": first(tokens[0], tokens[1]), "static_vs_plain": first(tokens[1], tokens[2])}
    return out


def table(rows) -> str:
    from tabulate import tabulate

    keys = ["model", "batch", "config", "backend", "prefill_p50_ms", "prefill_p90_ms", "tpot_p50_ms", "tpot_p90_ms",
            "tokens_per_s", "peak_mib"]
    lines = [[r[k] for k in keys] if "error" not in r else [r[k] for k in keys[:4]] + [r["error"]] + [""] * 5
             for r in rows]
    return tabulate(lines, headers=keys, tablefmt="github", floatfmt=".4g")


def main() -> None:
    global DEVICE, PROMPT, NEW
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--group", choices=("quick", "gpt2", "xl", "all"), default="all")
    parser.add_argument("--workdir", default="/tmp/wd")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--prompt", type=int, default=PROMPT)
    parser.add_argument("--new", type=int, default=NEW)
    parser.add_argument("--gpt2-dir", default="/tmp/shapes/gpt2", help="GPT-2 124M shapes (make_shapes_model.py)")
    args = parser.parse_args()
    DEVICE, PROMPT, NEW = args.device, args.prompt, args.new
    SHAPES["gpt2"] = args.gpt2_dir
    args.out.mkdir(parents=True, exist_ok=True)
    rows, checks, plots = [], [], {}
    started = time.time()
    for label, family, torch_dir, batches, configs in models(args.group):
        for batch in batches:
            for config in configs:
                t0 = time.time()
                try:
                    got, _ = bench_rows(label, family, torch_dir, batch, config, args.workdir,
                                        iterations=10 if label == "gpt2" else 3)
                    rows += got
                except Exception as exc:  # one failed configuration must not hide the others
                    traceback.print_exc()
                    rows.append({"model": label, "batch": batch, "config": config, "backend": "-",
                                 "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"})
                print(f"[{time.time() - started:6.0f}s] {label} b{batch} {config}: {time.time() - t0:.0f}s", flush=True)
                if config != "eager" and torch_dir and batch in (1, 8) and "xl" not in label:
                    try:
                        checks.append({"model": label, "batch": batch, "config": config,
                                       "first_difference": same_tokens(family, torch_dir, batch, config, args.workdir)})
                    except Exception as exc:
                        traceback.print_exc()
                        checks.append({"model": label, "batch": batch, "config": config, "error": str(exc)[:200]})
        if torch_dir:  # per-token latency against sequence length, every configuration, batch 1
            results = []
            for config in configs:
                try:
                    for r in traced(label, family, torch_dir, config, args.workdir):
                        results.append(dataclasses.replace(r, backend=f"{r.backend} ({config})"))
                except Exception:
                    traceback.print_exc()
            name = f"per_token_{label}_b1.png"
            plot_per_token(results, PROMPT, str(args.out / name),
                           f"{label} shapes, fp16, batch 1, prompt {PROMPT}: per-token latency (one traced run each)")
            plots[label] = name
    doc = {"environment": environment(torch.device(DEVICE)), "anchors_per_token_ms": ANCHORS, "prompt": PROMPT,
           "new_tokens": NEW, "rows": rows, "token_checks": checks, "plots": plots,
           "seconds": time.time() - started}
    (args.out / f"speed-{args.group}.json").write_text(json.dumps(doc, indent=1, default=str))
    text = table(rows) + "\n\ntoken checks (first differing new-token index per row; None = identical):\n" + \
        "\n".join(json.dumps(c) for c in checks) + "\n"
    (args.out / f"speed-{args.group}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
