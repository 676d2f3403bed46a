#!/usr/bin/env python3
"""The GPU speed matrix: fp16 benchmarks of every configuration on GPT-2 124M and gpt2-xl shapes (random weights,
tools/assets/make_shapes_model.py, made in --shapes-dir when missing) and the families' offline defaults, plus a
token check of each optimised configuration against the same backend's plain path.

Configurations (each a `run.py benchmark` option set, run in-process through NNDF.actions.benchmark):
  eager         growing KV cache; HF `generate` (eager) timed beside it
  static-graph  --static-cache --use-cuda-graph; HF `generate` with its own static cache beside it
  compiled      --static-cache --use-cuda-graph --torch-compile (frameworks only)
  autotuned     the same with --compile-mode max-autotune
Writes OUT/speed-GROUP.json (every row, environment, anchors), OUT/speed-GROUP.md (the table) and per-token
plots (OUT/per_token_MODEL_b1.png). The families' offline defaults run at prompt 64 / 64 new tokens (their
position tables hold 256; BLIP: 16 / 40).

    python tools/bench/speed_matrix.py [OUT] --group quick     # GPT-2 124M shapes, batch 1; OUT: temp/bench
    python tools/bench/speed_matrix.py [OUT] --group gpt2|xl|all|autotune|fused|fused-gpt2|fused-xl|fused-final
    python tools/bench/speed_matrix.py [OUT] --group llama-8b|llama-small|llama-ort --new 128   # LLAMA shapes
    python tools/bench/speed_matrix.py [OUT] --group llama-ab --new 128 [--variants default,sdpa,...]  # step A/B
    python tools/bench/speed_matrix.py temp/smoke --group quick --device cpu --prompt 8 --new 8   # CPU smoke run

Needs a CUDA GPU with onnxruntime-gpu for the onnxrt rows (or `--backends frameworks`). `autotune` is a
frameworks-only group (~6 minutes on an H200): compiled vs autotuned for GPT-2 124M (batch 1; batch 8
autotuned) and gpt2-xl shapes, the GPU time of the captured step alone with its kernels (`step_time`), the token
check, an HF eager anchor and the offline defaults. The `fused*` groups put the fused decode step
(--fused-decode) against the paths it replaces. The job groups (autotune, fused*) write their JSON after every
job and start none after --deadline seconds, so a run cut off by a time limit keeps what finished.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from CausalLM.fused_step import FUSING_TYPES, FusedSettings  # noqa: E402
from NNDF.actions.benchmark import benchmark  # noqa: E402
from NNDF.actions.common import backend_steps, generate_prompt, open_run  # noqa: E402
from NNDF.generation import GenerationConfig  # noqa: E402
from NNDF.options import BenchmarkOptions, ModelOptions, SamplingOptions, TimingOptions  # noqa: E402
from NNDF.plot import plot_per_token  # noqa: E402
from NNDF.results import environment  # noqa: E402
from NNDF.tasks import Prompt  # noqa: E402
from tools.bench.kernel_table import kernel_table  # noqa: E402

# reference points measured on an H200 (fp16, batch 1, prompt 128, 256 new tokens; docs/PERFORMANCE.md): per-token ms
ANCHORS = {"gpt2": {"floor": 0.059, "hf eager": 4.40, "hf static": 2.83, "ORT IO-binding loop": 1.93},
           "gpt2-xl": {"floor": 0.73, "hf eager": 14.2}}
CONFIGS = {
    "eager": dict(backends=("frameworks", "onnxrt"), options={}),
    "static-graph": dict(backends=("frameworks", "onnxrt"), options=dict(static_cache=True, use_cuda_graph=True)),
    "compiled": dict(backends=("frameworks",), options=dict(static_cache=True, use_cuda_graph=True, torch_compile=True)),
    "autotuned": dict(backends=("frameworks",), options=dict(static_cache=True, use_cuda_graph=True, torch_compile=True,
                                                           compile_mode="max-autotune")),
    "fused": dict(backends=("frameworks", "onnxrt"), options=dict(static_cache=True, use_cuda_graph=True,
                                                                  torch_compile=True, fused_decode=True)),
    "ort-fused": dict(backends=("onnxrt",), options=dict(static_cache=True, use_cuda_graph=True, fused_decode=True)),
    "fused-autotuned": dict(backends=("frameworks",), options=dict(static_cache=True, use_cuda_graph=True,
                                                                   torch_compile=True, fused_decode=True,
                                                                   compile_mode="max-autotune")),
}
# (prompt, new tokens) of the offline defaults: their position tables hold 256 (blip-offline's text decoder: 64)
OFFLINE_LENGTHS = {"BLIP": (16, 40)}
PROMPT, NEW = 128, 256
SHAPES = {name: str(ROOT / "temp/shapes" / name)  # --shapes-dir
          for name in ("gpt2", "gpt2-xl", "llama-3-8b", "qwen2.5-0.5b", "mistral-7b-w64")}


def models(group: str):
    """(label, family, torch_dir or None, batches, configs, (prompt, new)) of a group: quick, gpt2 (124M shapes
    at batch 1 and 8, and the families' offline defaults), xl (gpt2-xl shapes at batch 1), or all."""
    if group == "quick":
        return [("gpt2", "GPT2", SHAPES["gpt2"], (1,), ("eager", "static-graph", "compiled"), (PROMPT, NEW))]
    out = []
    if group in ("gpt2", "all"):
        out.append(("gpt2", "GPT2", SHAPES["gpt2"], (1, 8), tuple(CONFIGS), (PROMPT, NEW)))
        out += offline_defaults(("eager", "static-graph"))
    if group in ("xl", "all"):
        out.append(("gpt2-xl", "GPT2", SHAPES["gpt2-xl"], (1,), tuple(CONFIGS), (PROMPT, NEW)))
    return out


def offline_defaults(decoder_configs):
    def lengths(family):
        return OFFLINE_LENGTHS.get(family, (64, 64))

    out = [(f"{f} offline default", f, None, (1,), decoder_configs, lengths(f)) for f in ("GPT2", "OPT", "BLOOM")]
    return out + [(f"{f} offline default", f, None, (1,), ("eager",), lengths(f))  # encoder-decoder caches
                  for f in ("T5", "BART", "BLIP")]                                # stay dynamic


DEVICE = "cuda"  # --device cpu: a smoke test of this script (fp32; the CUDA-graph configurations are refused)
BACKENDS: tuple[str, ...] | None = None  # --backends: restrict every configuration (e.g. frameworks alone)


def backends_of(config) -> tuple[str, ...]:
    return tuple(b for b in CONFIGS[config]["backends"] if BACKENDS is None or b in BACKENDS)


def options(torch_dir, batch, extra, workdir) -> ModelOptions:
    if DEVICE == "cpu":  # the smoke test: no CUDA graphs, no compilation (minutes on 2 cores)
        extra = {k: v for k, v in extra.items() if k not in ("use_cuda_graph", "torch_compile", "compile_mode")}
    return ModelOptions(torch_dir=torch_dir, device=DEVICE, fp16=DEVICE == "cuda", use_cache=True, batch_size=batch,
                        working_dir=workdir, **extra)


def bench_rows(label, family, torch_dir, batch, config, workdir, iterations, lengths=None, hf=None, backends=None,
               backend_options: tuple = ()):
    """`backend_options`: option groups the backends own (e.g. onnxrt's ORTOptions), as the CLI's flags give them."""
    prompt, new = lengths or (PROMPT, NEW)
    hf = config in ("eager", "static-graph") if hf is None else hf
    backends = backends or backends_of(config)
    report = benchmark(family, backends, options(torch_dir, batch, CONFIGS[config]["options"], workdir),
                       SamplingOptions(), TimingOptions(iterations=iterations, warmup=2),
                       BenchmarkOptions(input_seq_len=prompt, output_seq_len=new, hf_baseline=hf), *backend_options)
    rows = []
    for r in report.results:
        rows.append({"model": label, "batch": batch, "config": config, "backend": r.backend, "prompt": prompt,
                     "new": new, "prefill_p50_ms": r.prefill_ms.p50, "prefill_p90_ms": r.prefill_ms.p90,
                     "tpot_p50_ms": r.tpot_ms.p50, "tpot_p90_ms": r.tpot_ms.p90, "tokens_per_s": r.tokens_per_s,
                     "peak_mib": r.peak_memory_mb, "onnx_max_diff": r.onnx_max_diff, "weight_bytes": r.weight_bytes,
                     "weights_gb_s": r.weights_gb_s})
    return rows, report


def traced(label, family, torch_dir, config, workdir):
    """One traced run per backend (synchronised after each token) for the per-token plot."""
    report = benchmark(family, backends_of(config), options(torch_dir, 1, CONFIGS[config]["options"], workdir),
                       SamplingOptions(), TimingOptions(iterations=1, warmup=1),
                       BenchmarkOptions(PROMPT, NEW, plot="/tmp/ignored.png"))
    return report.results


def same_tokens(family, torch_dir, batch, config, workdir, new=128):
    """Greedy tokens of each backend under `config` against the same backend's static cache without CUDA graph
    (and compilation), and that against the plain growing cache (same random prompts): the index of the first
    difference per row, or None when equal. fp16 sums in another order (a full-length masked attention) may
    flip a near tie on random weights; the graph must replay its uncaptured step exactly."""
    out = {}
    gen = torch.Generator().manual_seed(1)
    for backend in backends_of(config):
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


def step_time(label, family, torch_dir, batch, config, workdir, replays=100, profiled=10) -> dict:
    """The GPU time of the captured one-token step alone: back-to-back replays of its CUDA graph between two
    CUDA events (the host launches far faster than the step runs, so this is device time, gaps between the
    graph's kernels included). TPOT minus this is what the generation loop adds per token. Also the step's
    kernels from torch.profiler (CUPTI sees the kernels of a replayed graph): count per step and the top 12 by
    device time. The cache position advances with every replay, so prompt + replays stays below the buffer."""
    run = open_run(family, options(torch_dir, batch, CONFIGS[config]["options"], workdir), ("frameworks",))
    with backend_steps(run, "frameworks") as (_, steps):
        length = PROMPT + NEW
        assert PROMPT + 1 + 5 + replays + profiled < length
        ids = torch.randint(0, run.source.config.vocab_size, (batch, PROMPT + 1), device=run.device)
        positions = torch.arange(PROMPT + 1, device=run.device).expand(batch, -1)
        mask = torch.ones(batch, PROMPT + 1, dtype=torch.long, device=run.device)
        slot = steps.new_cache(batch, length)
        steps.forward(ids[:, :PROMPT], mask[:, :PROMPT], positions[:, :PROMPT], slot, last_only=True)
        steps.forward(ids[:, PROMPT:], mask, positions[:, PROMPT:], slot, last_only=True)  # captures the step
        graph = slot.graph
        for _ in range(5):
            graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        result = {"model": label, "batch": batch, "config": config, "step_gpu_ms": start.elapsed_time(end) / replays}
        try:
            table = kernel_table(graph.replay, profiled)
            result["kernels_per_step"] = table["kernels_per_step"]
            result["kernel_us_per_step"] = table["us_per_step"]
            result["top_kernels"] = [{k: t[k] for k in ("name", "per_step", "us_per_step")} for t in table["top"]]
        except Exception as exc:  # the timing above stands without the breakdown
            result["profile_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return result


def table(rows) -> str:
    from tabulate import tabulate

    keys = ["model", "batch", "config", "backend", "prefill_p50_ms", "prefill_p90_ms", "tpot_p50_ms", "tpot_p90_ms",
            "tokens_per_s", "weights_gb_s", "peak_mib"]
    lines = [[r.get(k) for k in keys] if "error" not in r else [r[k] for k in keys[:4]] + [r["error"]] + [""] * 6
             for r in rows]
    return tabulate(lines, headers=keys, tablefmt="github", floatfmt=".4g")


def autotune_jobs():
    """This group's jobs in priority order (a cut-off run keeps the first ones): (kind, callable)."""
    gpt2, xl = SHAPES["gpt2"], SHAPES["gpt2-xl"]
    jobs = [("bench", lambda: bench_rows("gpt2", "GPT2", gpt2, 1, "compiled", WORKDIR, 10)),
            ("bench", lambda: bench_rows("gpt2", "GPT2", gpt2, 1, "autotuned", WORKDIR, 10))]
    jobs += [("step", lambda c=c: step_time("gpt2", "GPT2", gpt2, 1, c, WORKDIR))
             for c in ("static-graph", "compiled", "autotuned")]
    jobs += [("shapes", lambda: make_shapes("gpt2-xl")),
             ("bench", lambda: bench_rows("gpt2-xl", "GPT2", xl, 1, "autotuned", WORKDIR, 3)),
             ("bench", lambda: bench_rows("gpt2-xl", "GPT2", xl, 1, "compiled", WORKDIR, 3))]
    jobs += [("step", lambda c=c: step_time("gpt2-xl", "GPT2", xl, 1, c, WORKDIR)) for c in ("autotuned", "compiled")]
    jobs += [("bench", lambda: bench_rows("gpt2", "GPT2", gpt2, 8, "autotuned", WORKDIR, 10)),
             ("check", lambda: {"model": "gpt2", "batch": 1, "config": "autotuned",
                                "first_difference": same_tokens("GPT2", gpt2, 1, "autotuned", WORKDIR)})]
    for label, family, _, _, configs, lengths in offline_defaults(("eager", "static-graph")):
        jobs += [("bench", lambda f=family, c=c, n=lengths, l=label: bench_rows(l, f, None, 1, c, WORKDIR, 3, n, False))
                 for c in configs]
    jobs += [("bench", lambda: bench_rows("gpt2", "GPT2", gpt2, 1, "eager", WORKDIR, 5))]  # HF eager anchor
    return jobs


def fused_jobs(shapes: tuple[str, ...] = ("gpt2", "gpt2-xl")):
    """The fused groups' jobs in priority order: the fused decode step (frameworks compiled + onnxrt fused graph, both
    in CUDA graphs) against the paths it replaces, in one run on one GPU: GPT-2 124M at batch 1 and 8, gpt2-xl at
    batch 1; the captured step's GPU time and kernels; the fp16 token check (first difference against the static
    cache without graphs and against the plain growing cache)."""
    jobs = [("copy", copy_bandwidth)]
    if "gpt2" in shapes:
        g = SHAPES["gpt2"]
        jobs += [("bench", lambda: bench_rows("gpt2", "GPT2", g, 1, "fused", WORKDIR, 10)),
                 ("step", lambda: step_time("gpt2", "GPT2", g, 1, "fused", WORKDIR)),
                 ("check", lambda: {"model": "gpt2", "batch": 1, "config": "fused",
                                    "first_difference": same_tokens("GPT2", g, 1, "fused", WORKDIR)}),
                 ("bench", lambda: bench_rows("gpt2", "GPT2", g, 1, "eager", WORKDIR, 5)),  # + HF eager
                 ("bench", lambda: bench_rows("gpt2", "GPT2", g, 1, "compiled", WORKDIR, 10)),
                 ("bench", lambda: bench_rows("gpt2", "GPT2", g, 1, "static-graph", WORKDIR, 10, backends=("onnxrt",),
                                              hf=False)),
                 ("bench", lambda: bench_rows("gpt2", "GPT2", g, 8, "fused", WORKDIR, 10)),
                 ("step", lambda: step_time("gpt2", "GPT2", g, 8, "fused", WORKDIR)),
                 ("bench", lambda: bench_rows("gpt2", "GPT2", g, 8, "eager", WORKDIR, 5, hf=False)),
                 ("bench", lambda: bench_rows("gpt2", "GPT2", g, 1, "fused-autotuned", WORKDIR, 10))]
    if "gpt2-xl" in shapes:
        x = SHAPES["gpt2-xl"]
        jobs += [("shapes", lambda: make_shapes("gpt2-xl")),
                 ("bench", lambda: bench_rows("gpt2-xl", "GPT2", x, 1, "fused", WORKDIR, 3)),
                 ("step", lambda: step_time("gpt2-xl", "GPT2", x, 1, "fused", WORKDIR)),
                 ("bench", lambda: bench_rows("gpt2-xl", "GPT2", x, 1, "compiled", WORKDIR, 3)),
                 ("bench", lambda: bench_rows("gpt2-xl", "GPT2", x, 1, "eager", WORKDIR, 3)),  # onnxrt export: minutes
                 ("check", lambda: {"model": "gpt2-xl", "batch": 1, "config": "fused",
                                    "first_difference": same_tokens("GPT2", x, 1, "fused", WORKDIR, new=64)})]
    return jobs


def final_jobs():
    """A short re-measure of the fused rows with their baselines in one run (~5 minutes on an H100): GPT-2 124M
    at batch 1 (+ today's compiled step, the onnxrt growing graph and HF eager) and 8, gpt2-xl at batch 1."""
    g, x = SHAPES["gpt2"], SHAPES["gpt2-xl"]
    return [("copy", copy_bandwidth),
            ("bench", lambda: bench_rows("gpt2", "GPT2", g, 1, "fused", WORKDIR, 10)),
            ("step", lambda: step_time("gpt2", "GPT2", g, 1, "fused", WORKDIR)),
            ("check", lambda: {"model": "gpt2", "batch": 1, "config": "fused",
                               "first_difference": same_tokens("GPT2", g, 1, "fused", WORKDIR)}),
            ("bench", lambda: bench_rows("gpt2", "GPT2", g, 1, "compiled", WORKDIR, 10)),
            ("bench", lambda: bench_rows("gpt2", "GPT2", g, 1, "eager", WORKDIR, 5, backends=("onnxrt",))),
            ("bench", lambda: bench_rows("gpt2", "GPT2", g, 8, "fused", WORKDIR, 10)),
            ("shapes", lambda: make_shapes("gpt2-xl")),
            ("bench", lambda: bench_rows("gpt2-xl", "GPT2", x, 1, "fused", WORKDIR, 3)),
            ("step", lambda: step_time("gpt2-xl", "GPT2", x, 1, "fused", WORKDIR))]


def llama_jobs(shapes: tuple[str, ...]):
    """The llama groups' jobs in priority order: the LLAMA family's fused step (frameworks, compiled, in a CUDA
    graph) against HF's model under our static cache, graph and compile, HF `generate` with its own static cache
    (transformers compiles its step) and HF eager, at batch 1 (and 8 for Llama-3-8B); the captured step's GPU time
    and kernels; the fp16 token check."""
    jobs = [("copy", copy_bandwidth)]
    for shape in shapes:
        d = SHAPES[shape]
        jobs += [("shapes", lambda s=shape: make_shapes(s)),
                 ("bench", lambda s=shape, d=d: bench_rows(s, "LLAMA", d, 1, "fused", WORKDIR, 5, hf=False)),
                 ("step", lambda s=shape, d=d: step_time(s, "LLAMA", d, 1, "fused", WORKDIR)),
                 ("bench", lambda s=shape, d=d: bench_rows(s, "LLAMA", d, 1, "compiled", WORKDIR, 5, hf=True)),
                 ("bench", lambda s=shape, d=d: bench_rows(s, "LLAMA", d, 1, "eager", WORKDIR, 2, hf=True,
                                                           backends=("frameworks",))),
                 ("check", lambda s=shape, d=d: {"model": s, "batch": 1, "config": "fused",
                                                 "first_difference": same_tokens("LLAMA", d, 1, "fused", WORKDIR)}),
                 ("bench", lambda s=shape, d=d: bench_rows(s, "LLAMA", d, 1, "fused-autotuned", WORKDIR, 5,
                                                           hf=False))]
        if shape == "llama-3-8b":
            jobs += [("bench", lambda d=d: bench_rows("llama-3-8b", "LLAMA", d, 8, "fused", WORKDIR, 5, hf=False))]
    return jobs


# each variant of a decoder family's fused step (the llama-ab group, decoder_graphs.py): `default` is
# CausalLM.fused_step.DECODER_SETTINGS, the others FusedSettings' own defaults (inductor's kernels throughout:
# `inductor`) with these fields; any of them as VARIANT+loop also has the loop choose greedy generations' tokens,
# not the step (`step_settings`)
LLAMA_VARIANTS = {
    "default": None,
    "inductor": {},
    "split8": dict(split_above=2048, splits=8),  # long sums (Qwen2.5-0.5B's down: 4864 features) in 8 parts
    "split16": dict(split_above=2048, splits=16),
    "split4": dict(split_above=2048, splits=4),
    "split-all8": dict(split_above=512, splits=8),  # every product in 8 parts
    "cublas-long": dict(split_above=2048, splits=0),  # long sums through F.linear (cuBLAS)
    "sdpa": dict(attention="sdpa"),
    "sdpa-split8": dict(attention="sdpa", split_above=2048, splits=8),
    "transposed-values": dict(transposed_values=True),  # p.V sums along contiguous memory
    "fold-norms": dict(fold_norms=True),  # the RMSNorm statistics inside the product kernels
    "fold-transposed": dict(fold_norms=True, transposed_values=True),
    "gemv": dict(gemv_above=0),  # our Triton GEMV kernel for the products of the reduction form
    "gemv-long": dict(gemv_above=2048),  # ... for the long sums only (Qwen2.5-0.5B's down: 4864 features)
    "attention-kernel": dict(attention="kernel"),  # our Triton one-query attention kernel
    "kernels": dict(gemv_above=0, attention="kernel"),
    "kernels-long": dict(gemv_above=2048, attention="kernel"),
    "kernels-long-head": dict(gemv_above=2048, gemv_head=True, attention="kernel"),
    # our GEMV for the products of narrow models only (Mistral-7B's and Llama-3-8B's 4096 features: cuBLAS)
    "kernels-narrow": dict(gemv_above=0, attention="kernel", gemv_width=2048),
    "kernels-split": dict(gemv_above=0, attention="split"),  # our attention kernel over column chunks
    "gemv-sdpa": dict(gemv_above=0, attention="sdpa"),
    # the default without the norms, activations, residual adds and K/V writes inside our GEMV (their own kernels
    # around it), and with them for every step that implements them (`FusedSettings.gemv_fusion`)
    "unfused": dict(gemv_above=0, attention="auto"),
    "fused-all": dict(gemv_above=0, attention="auto", gemv_fusion=FUSING_TYPES),
}


# the built ONNX Runtime graphs' settings a job can be built with instead of the default: module -> {constant: value}
ORT_VARIANTS = {
    "wide": {"T5.fused_onnx": {"WIDE_STREAM": True}},  # T5's fp16 graphs' residual stream and norms in fp32
    # the decoder's products as ONNX Runtime's MatMul, not this project's Linear op (--ort-products matmul)
    "matmul": {"NNDF.backends.onnxrt.options": {"CUDA_PRODUCTS": "matmul"}},
    # every family's Linear-op graphs with their skip norms in their own kernels / inside the products (the default:
    # as each family's builder declares, `norms_in_products`)
    "normkernels": {"CausalLM.fused_graph": {"NORMS_IN_PRODUCTS": False}},
    "normfold": {"CausalLM.fused_graph": {"NORMS_IN_PRODUCTS": True}},
    "alibi": {"BLOOM.fused_onnx": {"ALIBI_IN_PRODUCT": True}},  # BLOOM's ALiBi columns as the q/k/v product's addend
    "ungated": {"CausalLM.fused_graph": {"GATED": {}}},  # gated MLPs as a product, a Split, the activation and a Mul
    # every family's Linear-op graphs with this project's Attention op wherever no rotary is applied / with ONNX
    # Runtime's GroupQueryAttention (the default: as each family's builder declares, `own_attention`)
    "attention": {"CausalLM.fused_graph": {"OWN_ATTENTION": True}},
    "gqa": {"CausalLM.fused_graph": {"OWN_ATTENTION": False}},
    # environment variables the ops read at every launch (so while the job runs): the Linear op's products of 3-16
    # fp16 rows through cuBLAS and an epilogue kernel, not its tensor-core kernel
    "cublasrows": {"env": {"NNDF_ORT_LINEAR_DOT": "0"}},
    # ... and an RMSNorm before 3-16 fp16 rows in a kernel of its own, not inside the tensor-core kernel
    "rmskernel": {"env": {"NNDF_ORT_LINEAR_RMS_IN_DOT": "0"}},
    # ... and with 4 / 8 / 16 warps a block everywhere (the default: 8 where all blocks are resident at once with 8)
    "dotwarps4": {"env": {"NNDF_ORT_LINEAR_DOT_WARPS": "4"}},
    "dotwarps8": {"env": {"NNDF_ORT_LINEAR_DOT_WARPS": "8"}},
    "dotwarps16": {"env": {"NNDF_ORT_LINEAR_DOT_WARPS": "16"}},  # 16 up to 8 rows (8 above)
    # ... and the Attention op's loads of a cache the graph only reads (cross-attention) before its wait on the kernel
    # before (the default: after)
    "attnearly": {"env": {"NNDF_ORT_ATTENTION_EARLY": "1"}},
    # ... and the Attention op's `attend` with as many registers as the compiler likes (the default: capped so that 4
    # blocks fit a multiprocessor)
    "attnuncapped": {"env": {"NNDF_ORT_ATTENTION_BLOCKS": "1"}},
    # ... and the Linear and Attention ops' kernels launched without programmatic dependent launch (a kernel's time
    # in a profile is then its own, not also its wait for the kernel before)
    "nopdl": {"env": {"NNDF_ORT_LINEAR_PDL": "0", "NNDF_ORT_ATTENTION_PDL": "0"}},
    "linearnopdl": {"env": {"NNDF_ORT_LINEAR_PDL": "0"}},  # ... only the Linear op's
    "attnnopdl": {"env": {"NNDF_ORT_ATTENTION_PDL": "0"}},  # ... only the Attention op's
}
# this project's Attention op wherever no rotary is applied (`attention`), built in a folder of its own (so each build
# runs its check against PyTorch) with both ops' / only the Linear op's / only the Attention op's kernels launched
# plainly (attention-nopdl, attention-linearnopdl, attention-attnnopdl)
ORT_VARIANTS.update({f"attention-{v}": {**ORT_VARIANTS["attention"], "env": ORT_VARIANTS[v]["env"]}
                     for v in ("nopdl", "linearnopdl", "attnnopdl")})


def graph_workdir(workdir: str, variant: str | None) -> str:
    """Where the graphs of `variant` (ORT_VARIANTS) are built: a folder of their own, or the default graphs' folder
    where the variant only sets the ops' environment."""
    return f"{workdir}-{variant}" if variant and set(ORT_VARIANTS[variant]) - {"env"} else workdir


@contextlib.contextmanager
def graph_settings(variant: str | None):
    """The built ONNX Runtime graphs made with `variant`'s settings (ORT_VARIANTS; None: the default) while the
    block runs."""
    import importlib

    settings = dict(ORT_VARIANTS.get(variant or "", {}))
    env = settings.pop("env", {})
    changes = [(importlib.import_module(module), name, value)
               for module, values in settings.items() for name, value in values.items()]
    saved = [(module, name, getattr(module, name)) for module, name, _ in changes]
    saved_env = {name: os.environ.get(name) for name in env}
    for module, name, value in changes:
        setattr(module, name, value)
    os.environ.update(env)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# a variant's suffix after "+" (`loop_mode`; several as MODE+MODE)
LOOP_MODES = ("", "loop", "beamhost", "nopdl", "late", "allearly", "nodot", "splits1", "splits2", "splits4", "splits7",
              "splits8", "block16", "block32", "block64", "whole16", "whole32", "dwarps2", "dwarps4", "dwarps8",
              "splitres", "k512", "k2048", "eagerprompt", "bn2", "bn8", "warps4", "prog2048", "res1", "res2",
              "res4", "res8", "rwarps4", "dk64", "dk256", "wide2", "wide4", "wide8", "wide16", "nowide")


def known_variant(name: str, table: dict) -> bool:
    """Whether `name` is a variant of `table` (VARIANT, or VARIANT+MODE[+MODE...] for LOOP_MODES modes:
    `step_settings`)."""
    base, _, extra = name.partition("+")
    return base in table and all(mode in LOOP_MODES for mode in extra.split("+"))


@contextlib.contextmanager
def loop_mode(mode: str):
    """The generation loop on DEVICE while the block runs: "loop", greedy generations' tokens chosen by the loop, not
    the static step (DEVICE out of `NNDF.generation.GREEDY_IN_STEP`); "beamhost", beam searches' bookkeeping
    launched op by op from the host, not as one graph (DEVICE out of `NNDF.generation.BEAMS_IN_GRAPH`); "nopdl": the
    fused steps' kernels without programmatic dependent launch (`NNDF.backends.torch.compile.PROGRAMMATIC_LAUNCH`;
    the steps compiled afresh); "late": none of our kernels letting the next start before its loads are done,
    "allearly": every one letting it start as it starts (`compile.EARLY_LAUNCH` "none", "all"); "kN": our GEMV's
    one-row products in loads of N features (`kernels.TILING`'s `block_k`); "nodot": our GEMV's products of several
    rows summed elementwise, not through tensor-core dots (`NNDF.backends.torch.kernels.DOT_ROWS`); "splitsN": the
    dot form's products in at most N slices (`kernels.DOT_TILING["max_splits"]`); "blockN": the dot form's tiles of
    N weight rows (`block_n`: more programs for narrow outputs); "wholeN": both, unsplit in tiles of N rows (no
    partial sums to add after the kernel); "dwarpsN": the dot form with N warps a program; "dkN": its loads of N
    features (`block_k`); "splitres": one-row products that add a residual or write the K/V cache tiled as any
    other, in partial sums where split (`kernels.WHOLE_TILING` None); "eagerprompt": the prompt pass's layers run
    eagerly, not compiled (`FusedSettings.compiled_prompt`); "bnN", "warpsN", "progN": our GEMV's one-row tiling
    (`kernels.TILING`'s block_n, warps, programs); "resN", "rwarpsN": its one-row products that add a residual or
    write the K/V cache in tiles of N weight rows, or with N warps a program (`kernels.WHOLE_TILING`); "wideN": 4
    warps a program for the one-row products of weights of at least N Mi elements, "nowide": 2 for every product
    (`kernels.WIDE_WARPS`); "": as the
    defaults are; "MODE+MODE": both."""
    from CausalLM import fused_step
    from NNDF import generation
    from NNDF.backends.torch import compile as compile_options
    from NNDF.backends.torch import kernels

    if "+" in mode:
        first, _, rest = mode.partition("+")
        with loop_mode(first), loop_mode(rest):
            yield
        return
    saved = generation.GREEDY_IN_STEP, generation.BEAMS_IN_GRAPH, compile_options.PROGRAMMATIC_LAUNCH
    settings = fused_step.DECODER_SETTINGS
    dot = kernels.DOT_ROWS, dict(kernels.DOT_TILING), kernels.WHOLE_TILING, kernels.WIDE_WARPS
    launch, tiling = compile_options.EARLY_LAUNCH, dict(kernels.TILING)
    if mode == "loop":
        generation.GREEDY_IN_STEP = saved[0] - {DEVICE}
    elif mode == "beamhost":
        generation.BEAMS_IN_GRAPH = saved[1] - {DEVICE}
    elif mode == "nopdl":
        compile_options.PROGRAMMATIC_LAUNCH = False
    elif mode in ("late", "allearly"):
        compile_options.EARLY_LAUNCH = "all" if mode == "allearly" else "none"
    elif mode.startswith(("bn", "warps", "prog")):
        key = next(k for k in ("bn", "warps", "prog") if mode.startswith(k))
        kernels.TILING[dict(bn="block_n", warps="warps", prog="programs")[key]] = int(mode.removeprefix(key))
    elif mode.startswith("res"):
        kernels.WHOLE_TILING = dict(kernels.WHOLE_TILING, block_n=int(mode.removeprefix("res")))
    elif mode.startswith("rwarps"):
        kernels.WHOLE_TILING = dict(kernels.WHOLE_TILING, warps=int(mode.removeprefix("rwarps")))
    elif mode.startswith("wide"):
        kernels.WIDE_WARPS = (int(mode.removeprefix("wide")) << 20, 1 << 62, 4)
    elif mode == "nowide":
        kernels.WIDE_WARPS = None
    elif mode.startswith("k"):
        kernels.TILING["block_k"] = int(mode.removeprefix("k"))
    elif mode == "nodot":
        kernels.DOT_ROWS = None
    elif mode.startswith("splits"):
        kernels.DOT_TILING["max_splits"] = int(mode.removeprefix("splits"))
    elif mode.startswith("block"):
        kernels.DOT_TILING["block_n"] = int(mode.removeprefix("block"))
    elif mode.startswith("dwarps"):
        kernels.DOT_TILING["warps"] = int(mode.removeprefix("dwarps"))
    elif mode.startswith("dk"):
        kernels.DOT_TILING["block_k"] = int(mode.removeprefix("dk"))
    elif mode.startswith("whole"):
        kernels.DOT_TILING.update(block_n=int(mode.removeprefix("whole")), max_splits=1)
    elif mode == "splitres":
        kernels.WHOLE_TILING = None
    elif mode == "eagerprompt":
        fused_step.DECODER_SETTINGS = dataclasses.replace(fused_step.DECODER_SETTINGS, compiled_prompt=False)
    try:
        yield
    finally:
        generation.GREEDY_IN_STEP, generation.BEAMS_IN_GRAPH, compile_options.PROGRAMMATIC_LAUNCH = saved
        kernels.DOT_ROWS, kernels.DOT_TILING, kernels.WHOLE_TILING, kernels.WIDE_WARPS = dot
        compile_options.EARLY_LAUNCH, kernels.TILING = launch, tiling
        fused_step.DECODER_SETTINGS = settings


@contextlib.contextmanager
def step_settings(variant: str):
    """The decoder families' fused steps built with this variant's settings (LLAMA_VARIANTS) while the block runs;
    `VARIANT+MODE`: those settings, and the loop in that mode (`loop_mode`)."""
    from CausalLM import fused_step

    base, _, extra = variant.partition("+")
    saved, fields = fused_step.DECODER_SETTINGS, LLAMA_VARIANTS[base]
    fused_step.DECODER_SETTINGS = saved if fields is None else FusedSettings(**fields)
    torch._dynamo.reset()  # compiled afresh with these settings and inductor's options
    try:
        with loop_mode(extra):
            yield
    finally:
        fused_step.DECODER_SETTINGS = saved


def _products_only(fields: dict) -> bool:
    return fields is not None and bool(fields) and set(fields) <= {"split_above", "splits", "gemv_above", "gemv_head"}


def llama_ab_jobs(shapes: tuple[str, ...], variants: tuple[str, ...], hf: bool = True):
    """The llama-ab group, per shape: the captured step's GPU time and kernels of each variant of the LLAMA fused
    step's settings (LLAMA_VARIANTS; Mistral-7B's products are cuBLAS at any of them, so it times the variants
    that change something else), then the benchmark rows of the fastest variant and of the default; at
    Qwen2.5-0.5B shapes HF static and eager beside them, at Mistral-7B shapes (a 64-column window under the
    128-token prompt) the fp16 token check."""
    jobs, times = [("copy", copy_bandwidth)], {}

    def step(shape, variant):
        torch._dynamo.reset()  # each variant compiles afresh (past 8 recompiles dynamo would run the layer eagerly)
        with step_settings(variant):
            result = step_time(shape, "LLAMA", SHAPES[shape], 1, "fused", WORKDIR)
        times[(shape, variant)] = result["step_gpu_ms"]
        return {**result, "variant": variant}

    def rows(shape, variant):
        with step_settings(variant):
            got, report = bench_rows(shape, "LLAMA", SHAPES[shape], 1, "fused", WORKDIR, 5, hf=False)
        return [{**r, "config": f"fused:{variant}"} for r in got], report

    def fastest(shape):  # of the variants timed (none without CUDA: the default)
        return min([(t, v) for (s, v), t in times.items() if s == shape] or [(0, "default")])[1]

    for shape in shapes:
        # Mistral-7B's products are cuBLAS whatever the product settings: it times the other variants
        timed = [v for v in variants if shape == "qwen2.5-0.5b" or not _products_only(LLAMA_VARIANTS[v])]
        jobs += [("shapes", lambda s=shape: make_shapes(s))]
        jobs += [("step", lambda s=shape, v=v: step(s, v)) for v in timed]
        jobs += [("bench", lambda s=shape: rows(s, fastest(s))),
                 ("bench", lambda s=shape: rows(s, "default"))]
        if shape == "qwen2.5-0.5b" and hf:
            d = SHAPES[shape]
            jobs += [("bench", lambda d=d: bench_rows("qwen2.5-0.5b", "LLAMA", d, 1, "compiled", WORKDIR, 5, hf=True)),
                     ("bench", lambda d=d: bench_rows("qwen2.5-0.5b", "LLAMA", d, 1, "eager", WORKDIR, 2, hf=True,
                                                      backends=("frameworks",)))]
        elif shape != "qwen2.5-0.5b":
            jobs += [("check", lambda s=shape: {"model": s, "batch": 1, "config": "fused", "first_difference":
                                                same_tokens("LLAMA", SHAPES[s], 1, "fused", WORKDIR)})]
    return jobs


def llama_ort_jobs():
    """The llama-ort group: the LLAMA family's fused ONNX Runtime graph (static cache, CUDA graph) at Qwen2.5-0.5B,
    Mistral-7B (64-column window) and Llama-3-8B shapes, batch 1 (the graph is built from the weights on first
    use: its build time is logged)."""
    jobs = [("copy", copy_bandwidth)]
    for shape in ("qwen2.5-0.5b", "mistral-7b-w64", "llama-3-8b"):
        d = SHAPES[shape]
        jobs += [("shapes", lambda s=shape: make_shapes(s)),
                 ("bench", lambda s=shape, d=d: bench_rows(s, "LLAMA", d, 1, "ort-fused", WORKDIR, 5, hf=False))]
    return jobs


def copy_bandwidth(gib: int = 2, repeats: int = 20) -> dict:
    """The card's measured copy bandwidth (bytes read + bytes written per second, device to device): the floor
    a decode step is held against (weight bytes / this)."""
    src = torch.randn(gib * 2**28, device=DEVICE)  # float32: gib GiB
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    nbytes = 2 * src.numel() * src.element_size()
    return {"copy_tb_s_median": nbytes / times[len(times) // 2] / 1e12, "copy_tb_s_best": nbytes / times[0] / 1e12,
            "bytes_moved": nbytes}


def make_shapes(shape: str) -> dict:
    """The shapes model's folder, made (in a child process: its weights leave with it) unless it is there."""
    import subprocess

    if (Path(SHAPES[shape]) / "config.json").is_file():
        return {"found": shape}
    subprocess.run([sys.executable, str(ROOT / "tools/assets/make_shapes_model.py"), shape, SHAPES[shape]], check=True,
                   capture_output=True)
    return {"made": shape}


# shapes made before a group starts (the job groups make gpt2-xl as a job of their own, after the GPT-2 rows)
UPFRONT_SHAPES = {"quick": ("gpt2",), "gpt2": ("gpt2",), "xl": ("gpt2-xl",), "all": ("gpt2", "gpt2-xl"),
                  "autotune": ("gpt2",), "fused": ("gpt2",), "fused-gpt2": ("gpt2",), "fused-xl": (),
                  "fused-final": ("gpt2",), "llama-8b": (), "llama-small": (), "llama-ort": (), "llama-ab": ()}


WORKDIR = "/tmp/wd"


def run_jobs(out: Path, jobs, deadline: float, name: str = "autotune") -> None:
    """Run each job, record its rows (or its error), rewrite the JSON and table after every one; start no job
    once `deadline` seconds have passed (a caller's time limit would otherwise kill the run before its summary)."""
    doc = {"environment": environment(torch.device(DEVICE)), "anchors_per_token_ms": ANCHORS, "prompt": PROMPT,
           "new_tokens": NEW, "rows": [], "step_times": [], "token_checks": [], "log": []}
    started = time.time()

    def save():
        doc["seconds"] = time.time() - started
        (out / f"speed-{name}.json").write_text(json.dumps(doc, indent=1, default=str))
        steps = "\n".join(json.dumps({k: v for k, v in s.items() if k != "top_kernels"}) for s in doc["step_times"])
        (out / f"speed-{name}.md").write_text(table(doc["rows"]) + "\n\nstep times:\n" + steps +
                                               "\n\ntoken checks:\n" + "\n".join(map(json.dumps, doc["token_checks"])))

    for kind, job in jobs:
        t0 = time.time()
        if kind in ("step", "copy") and DEVICE != "cuda":
            continue  # replays a CUDA graph / times with CUDA events
        if t0 - started > deadline:
            doc["log"].append({"job": kind, "seconds": 0, "status": "skipped: past the deadline"})
            continue
        try:
            got = job()
            if kind == "bench":
                doc["rows"] += got[0]
            elif kind == "step":
                doc["step_times"].append(got)
            elif kind == "check":
                doc["token_checks"].append(got)
            elif kind == "copy":
                doc["copy_bandwidth"] = got
            status = "ok"
        except Exception as exc:  # one failed job must not hide the others
            traceback.print_exc()
            status = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        doc["log"].append({"job": kind, "seconds": round(time.time() - t0, 1), "status": status})
        print(f"[{time.time() - started:6.0f}s] {kind}: {time.time() - t0:.0f}s {status}", flush=True)
        save()
    save()
    print((out / f"speed-{name}.md").read_text())
    for s in doc["step_times"]:
        print(f"\n{s['model']} b{s['batch']} {s['config']} {s.get('variant', '')}: step {s['step_gpu_ms']:.4f} ms, "
              f"{s.get('kernels_per_step')} kernels, {s.get('kernel_us_per_step')} us in kernels")
        for k in s.get("top_kernels", []):
            print(f"  {k['us_per_step']:8.1f} us  x{k['per_step']:.0f}  {k['name']}")


def main() -> None:
    global DEVICE, PROMPT, NEW, BACKENDS, WORKDIR
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, nargs="?", default=ROOT / "temp" / "bench",
                        help="folder for speed-GROUP.json, .md and the plots (default temp/bench)")
    parser.add_argument("--group", choices=("quick", "gpt2", "xl", "all", "autotune", "fused", "fused-gpt2",
                                            "fused-xl", "fused-final", "llama-8b", "llama-small", "llama-ort", "llama-ab"),
                        default="all")
    parser.add_argument("--variants", default=",".join(LLAMA_VARIANTS),
                        help=f"llama-ab: the LLAMA step variants to time ({', '.join(LLAMA_VARIANTS)})")
    parser.add_argument("--ab-shapes", default="qwen2.5-0.5b,mistral-7b-w64", help="llama-ab: the shapes")
    parser.add_argument("--no-hf", action="store_true", help="llama-ab: leave out HF's rows")
    parser.add_argument("--workdir", default="/tmp/wd")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backends", nargs="+", help="only these backends (e.g. frameworks: no onnxruntime-gpu)")
    parser.add_argument("--deadline", type=float, default=330,
                        help="autotune and fused groups: start no job after this many seconds")
    parser.add_argument("--prompt", type=int, default=PROMPT)
    parser.add_argument("--new", type=int, default=NEW)
    parser.add_argument("--shapes-dir", type=Path, default=ROOT / "temp" / "shapes",
                        help="where the shapes models are (made when missing; default temp/shapes)")
    parser.add_argument("--gpt2-dir", help="GPT-2 124M shapes folder (default SHAPES_DIR/gpt2)")
    args = parser.parse_args()
    DEVICE, PROMPT, NEW, WORKDIR = args.device, args.prompt, args.new, args.workdir
    BACKENDS = tuple(args.backends) if args.backends else None
    SHAPES.update({shape: str(args.shapes_dir / shape) for shape in SHAPES})
    SHAPES["gpt2"] = args.gpt2_dir or SHAPES["gpt2"]
    args.out.mkdir(parents=True, exist_ok=True)
    for shape in UPFRONT_SHAPES[args.group]:
        make_shapes(shape)
    if args.group == "autotune":
        BACKENDS = ("frameworks",)
        return run_jobs(args.out, autotune_jobs(), args.deadline)
    if args.group == "fused-final":
        return run_jobs(args.out, final_jobs(), args.deadline, args.group)
    if args.group == "llama-ort":
        return run_jobs(args.out, llama_ort_jobs(), args.deadline, args.group)
    if args.group == "llama-ab":
        BACKENDS = ("frameworks",)
        jobs = llama_ab_jobs(tuple(args.ab_shapes.split(",")), tuple(args.variants.split(",")), not args.no_hf)
        return run_jobs(args.out, jobs, args.deadline, f"{args.group}-{args.ab_shapes.split(',')[0]}")
    if args.group.startswith("llama"):
        BACKENDS = ("frameworks",)
        shapes = {"llama-8b": ("llama-3-8b",), "llama-small": ("qwen2.5-0.5b", "mistral-7b-w64")}[args.group]
        return run_jobs(args.out, llama_jobs(shapes), args.deadline, args.group)
    if args.group.startswith("fused"):
        shapes = {"fused": ("gpt2", "gpt2-xl"), "fused-gpt2": ("gpt2",), "fused-xl": ("gpt2-xl",)}[args.group]
        return run_jobs(args.out, fused_jobs(shapes), args.deadline, args.group)
    rows, checks, plots = [], [], {}
    started = time.time()
    for label, family, torch_dir, batches, configs, lengths in models(args.group):
        for batch in batches:
            for config in configs:
                t0 = time.time()
                try:
                    got, _ = bench_rows(label, family, torch_dir, batch, config, args.workdir,
                                        iterations=10 if label == "gpt2" else 3, lengths=lengths)
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
