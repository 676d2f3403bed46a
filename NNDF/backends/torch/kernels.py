"""Our own Triton kernels for the fused decode steps on CUDA (`CausalLM.fused_step`): the two places where a
one-token step leaves the card's bandwidth unused with inductor's kernels and cuBLAS.

- `gemv`: a product of few rows with a weight stored [out, in] (nn.Linear's layout). Each program reads a tile
  of `block_n` weight rows (contiguous along `in`, so every load is a wide coalesced read) over one of `splits`
  slices of the input features and keeps elementwise fp32 sums, reduced once at its end; the partial sums
  [splits, rows, out] go back to the caller, whose sum over `splits` inductor fuses with what follows (bias,
  activation, residual, the next norm). Splitting a long sum over many programs is what keeps enough weight
  reads in flight for a product with few outputs (a 4864-feature sum into 896 outputs: inductor's one-program-
  per-output reduction reads it at ~1 TB/s on an H100), and no split-K reduction kernel follows (cuBLAS's does).
  Unsplit (one slice covers the features), the kernel adds the bias and writes the caller's dtype itself. From
  `DOT_ROWS` rows (beams, batches: up to 16) the programs sum through tensor-core dots instead (`tl.dot` of the rows,
  padded to 16, with a tile of 16+ weight rows): the same fp32 sums of exact products, in another order, at one
  row's cost in weight reads, where the elementwise form's work and registers grow with the rows.
- `decode_attention`: one query per row and query head over a static K/V cache [rows, kv heads, length, dim],
  reading only the columns that can count (up to the write position held on the device, from the window's start;
  scores optionally plus ALiBi or an additive bias such as T5's relative positions) in one kernel (one program
  per row and query head: scores, online softmax and p.V), for buffers up to `attention_columns`;
  `decode_attention_split` cuts the columns into chunks over more programs (flash decoding).

Both are opaque custom ops (`torch.library.custom_op`, with their output shapes for tracing), so `torch.compile`
keeps them inside its graph (its own kernels around them) and a CUDA graph captures them. Both run under Triton's
interpreter (`TRITON_INTERPRET=1`) on CPU tensors, which is how the CPU tests check them against plain torch.
Imported only where a step uses them (Triton is CUDA-only otherwise).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch.library import custom_op

from NNDF.backends.torch import compile as compile_options
from NNDF.backends.torch.compile import programmatic_launch
from NNDF.slots import write_kv_columns

# the default tiling on CUDA: the fastest measured for every product of Qwen2.5-0.5B's step on an H200 (kernel
# alone, tools/bench/kernel_bench.py; within ~5% of the best at each product): 4 weight rows a program, the
# features in loads of 1024 (one load for 896), 2 warps, split to ~1024 programs (~8 per SM of 132)
TILING = dict(programs=1024, block_n=4, block_k=1024, warps=2)
# the tiling under Triton's interpreter (the CPU tests), where programs run one after another: few, large ones
INTERPRETED = dict(programs=1, block_n=256, block_k=128)
# the tiling of a one-row product `gemv` adds a residual to or writes a K/V cache from (on CUDA): unsplit, so the
# kernel does it and no kernel follows to sum partial sums, in tiles of 4 weight rows (None: as any other product).
# Captured steps on an H200, ms, tiles of 2 / 4 / 8 rows: gpt2-xl 1.827 / 1.792 / 1.996, GPT-2 124M 0.230 / 0.229 /
# 0.249, Qwen2.5-0.5B 0.669 / 0.670 / 0.670, OPT-6.7B 3.914 / 3.912 / 3.912 (docs/PERFORMANCE.md)
WHOLE_TILING: dict | None = dict(programs=1, block_n=4)
# (from, below, warps): one-row products of a weight of from..below-1 elements take that many warps a program on
# CUDA (None: TILING's and WHOLE_TILING's warps for every product). Captured steps on an H100, ms of GPU time, 2 warps
# for every product / 4 for those of 4-16 Mi weights / 4 for every product: gpt2-xl 1.949-1.957 / 1.895-1.904 /
# 1.888-1.904, Qwen2.5-0.5B 0.765 / 0.760 (4 Mi and over) / 0.759, GPT-2 124M 0.2455 / (none in range) / 0.2523,
# OPT-6.7B 5.101 / (none in range) / 5.374; ms a token, 2 warps / 4 for 4-16 Mi: gpt2-xl 2.009 / 1.965, BART-large
# 0.5059 / 0.5034, flan-T5-XL 1.653 / 1.673 (the one loss) (docs/PERFORMANCE.md, 2026-12-06)
WIDE_WARPS: tuple[int, int, int] | None = (4 << 20, 16 << 20, 4)
# products of at least this many rows (and at most DOT_MAX_ROWS), inputs in the weight's dtype, sum through
# tensor-core dots (None: never); their tiling on CUDA: 32 weight rows a program, loads of 128 features, 2 warps.
# Alone, 64 rows and 4 warps were the fastest kernel at 4 and 8 rows for every product of t5-base's and
# BART-large's layers on an H200 (tools/bench/kernel_bench.py --dot: 1.8-4.5 us, against cuBLAS's 4.2-7.9 at 8
# rows); in the captured steps, 32 rows and 2 warps are faster (ms a step on an H200 at 4 beams / batch 8, against
# 64 rows and 4 warps in the same call: t5-base 0.679 / 0.472 against 0.695 / 0.486, BLIP-large 0.750 / 0.567
# against 0.768 / 0.582, flan-T5-XL 2.148 / 1.886 against 2.182 / 1.913; BART-large 0.778 / 0.623 against 0.792 /
# 0.607, its batch 8 the one loss; docs/device-runs/2026-11-29-h200-dot-tiling). Split to ~1024 programs but
# in at most 7 slices: the next kernel reads and adds every slice's partial sums, and inductor unrolls a sum of
# fewer than 8 (`unroll_reductions_threshold`) into the kernel that reads it, where 8 or more take a reduction kernel
# of their own (at batch 8 on an H200, ms a step with at most 4 slices against any number: flan-T5-XL 1.862 against
# 2.089, BART-large 0.627 against 0.851, t5-base 0.563 against 0.597; BLIP-large 0.610 against 0.559). At most 7
# rather than 4 (t5-base's products of 768 features in 6 slices of one load each, not 3 of two), in one call, batch
# 8 / 4 beams, ms a step: t5-base 0.421 / 0.626 against 0.464 / 0.671, BLIP-large 0.511 / 0.687 against 0.556 /
# 0.735, BART-large 0.603 / 0.756 against 0.612 / 0.767, flan-T5-XL 1.865 / 2.128 against 1.867 / 2.131; t5-small
# 0.227 / 0.419 against 0.223 / 0.418 (docs/device-runs/2026-11-29-h200-dot-splits). Unsplit products, even only
# those of up to 1024 features, lose more to their fewer programs than the partial sums' adds cost (t5-base at
# batch 8: 0.506-0.585 ms against 0.490, BART-large 0.770 against 0.611)
DOT_ROWS: int | None = 2
DOT_MAX_ROWS = 16
DOT_TILING = dict(programs=1024, block_n=32, block_k=128, warps=2, max_splits=7)


class GemvConfig(NamedTuple):
    """How `gemv` tiles one product: `block_n` weight rows per program, `block_k` features per load, the input
    features cut into `splits` slices of `k_per_split` (a multiple of `block_k`), `warps` per program; `dot`: the
    sums through tensor-core dots (`dot_config`)."""

    block_n: int
    block_k: int
    splits: int
    k_per_split: int
    warps: int
    dot: bool = False


def gemv_config(rows: int, out_features: int, in_features: int, programs: int = TILING["programs"],
                block_n: int = TILING["block_n"], block_k: int = TILING["block_k"],
                warps: int = TILING["warps"]) -> GemvConfig:
    """The tiling of a [rows, in] x [out, in]^T product: `block_n` rows of the weight a program, loads of
    `block_k` features (over the rows: each program keeps rows x block_n x block_k running sums), the features split
    so that there are about `programs` programs."""
    block_k = max(32, min(block_k // triton.next_power_of_2(rows), triton.next_power_of_2(in_features)))
    tiles = triton.cdiv(out_features, block_n)
    k_blocks = triton.cdiv(in_features, block_k)
    splits = max(1, min(k_blocks, round(programs / tiles)))
    k_per_split = triton.cdiv(k_blocks, splits) * block_k
    return GemvConfig(block_n, block_k, triton.cdiv(in_features, k_per_split), k_per_split, warps)


def dot_config(rows: int, out_features: int, in_features: int, programs: int = DOT_TILING["programs"],
               block_n: int = DOT_TILING["block_n"], block_k: int = DOT_TILING["block_k"],
               warps: int = DOT_TILING["warps"], max_splits: int | None = DOT_TILING["max_splits"]) -> GemvConfig:
    """The tiling of a product of 2-16 rows summed through tensor-core dots: as `gemv_config`'s, but the loads of
    `block_k` features stay that wide at any number of rows (a dot keeps [16, block_n] sums, not
    rows x block_n x block_k), every side at least 16 (a dot's smallest), and at most `max_splits` slices (None:
    any number; each slice's partial sums are what the caller's next kernel reads and adds)."""
    if not 1 <= rows <= DOT_MAX_ROWS:
        raise ValueError(f"{rows} rows: the dot form takes 1 to {DOT_MAX_ROWS}")
    block_n, block_k = max(16, block_n), max(16, min(block_k, triton.next_power_of_2(in_features)))
    tiles = triton.cdiv(out_features, block_n)
    k_blocks = triton.cdiv(in_features, block_k)
    splits = max(1, min(k_blocks, round(programs / tiles), max_splits or k_blocks))
    k_per_split = triton.cdiv(k_blocks, splits) * block_k
    return GemvConfig(block_n, block_k, triton.cdiv(in_features, k_per_split), k_per_split, warps, True)


def uses_dot(rows: int, x_dtype: torch.dtype, weight_dtype: torch.dtype) -> bool:
    """Whether `gemv` sums a product of `rows` rows through tensor-core dots by default (`DOT_ROWS`): its input
    in the weight's dtype (a dot takes one; an fp32 input is not rounded to a half weight's)."""
    return DOT_ROWS is not None and DOT_ROWS <= rows <= DOT_MAX_ROWS and x_dtype == weight_dtype


@triton.jit
def _tile(ptr, index, k, count, in_features, stride):
    """Rows `index` [B] of a matrix stored [count, in_features] (row stride `stride`) at features `k` [BK]:
    [B, BK], zeros past its edges (a weight's rows, or the input's)."""
    return tl.load(ptr + index[:, None] * stride + k[None, :],
                   mask=(index[:, None] < count) & (k[None, :] < in_features), other=0.0)


@triton.jit
def _row_stats(x_ptr, r, rows, in_features, x_stride, eps, NORM: tl.constexpr, BLOCK_R: tl.constexpr,
               BLOCK_F: tl.constexpr, ONE_LOAD: tl.constexpr):
    """Each row's mean and 1 / standard deviation [BR] over all its features in fp32, as a norm before the product
    takes them: NORM 1 a layer norm (the mean, then the centred squares' mean), 2 an RMS norm (mean 0, the squares'
    mean). With ONE_LOAD (BLOCK_F covers the features) one load of the rows and both sums over the values in
    registers (the statistics sit between the wait for the kernel before and the product, so each read of x there
    is latency the product waits for); else two passes of BLOCK_F features a load."""
    kk = tl.arange(0, BLOCK_F)
    if ONE_LOAD:
        x = _tile(x_ptr, r, kk, rows, in_features, x_stride).to(tl.float32)
        mean = tl.zeros((BLOCK_R,), tl.float32)
        if NORM == 1:
            mean = tl.sum(x, axis=1) / in_features
        d = tl.where((kk < in_features)[None, :], x - mean[:, None], 0.0)
        return mean, 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / in_features + eps)
    mean = tl.zeros((BLOCK_R,), tl.float32)
    if NORM == 1:
        for start in tl.range(0, in_features, BLOCK_F):
            mean += tl.sum(_tile(x_ptr, r, start + kk, rows, in_features, x_stride).to(tl.float32), axis=1)
        mean = mean / in_features
    squares = tl.zeros((BLOCK_R,), tl.float32)
    for start in tl.range(0, in_features, BLOCK_F):
        k = start + kk
        d = _tile(x_ptr, r, k, rows, in_features, x_stride).to(tl.float32) - mean[:, None]
        d = tl.where((k < in_features)[None, :], d, 0.0)
        squares += tl.sum(d * d, axis=1)
    return mean, 1.0 / tl.sqrt(squares / in_features + eps)


@triton.jit
def _gelu(x, EXACT: tl.constexpr):
    """F.gelu(x) in fp32, rounded to x's dtype: exact (erf), or tanh's approximation (x * sigmoid(2u) is
    x * (1 + tanh(u)) / 2)."""
    y = x.to(tl.float32)
    if EXACT:
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    else:
        y = y * tl.sigmoid(1.5957691216057308 * (y + 0.044715 * y * y * y))
    return y.to(x.dtype)


@triton.jit
def _input(x_ptr, r, k, rows, in_features, x_stride, mean, rstd, gain_ptr, shift_ptr, NORM: tl.constexpr,
           ACT: tl.constexpr):
    """The product's input at features `k` [BR, BK] in x's dtype: x, or norm(x) (NORM, with `_row_stats`'s
    statistics) and act(x) (ACT, `ACTIVATION_CODES`), each rounded to x's dtype as the eager op before the product
    writes it: a layer norm in fp32 ((x - mean) * rstd * gain + shift); an RMS norm as HF's Llama and T5 (x * rstd
    in fp32, rounded, times the gain); ReLU; GELU (`_gelu`); SwiGLU (silu(gate) * up, the row's two halves)."""
    x = _tile(x_ptr, r, k, rows, in_features, x_stride)
    if NORM != 0:
        in_k = k < in_features
        gain = tl.load(gain_ptr + k, mask=in_k, other=0.0).to(tl.float32)[None, :]
        if NORM == 1:
            shift = tl.load(shift_ptr + k, mask=in_k, other=0.0).to(tl.float32)[None, :]
            x = ((x.to(tl.float32) - mean[:, None]) * rstd[:, None] * gain + shift).to(x.dtype)
        else:
            x = ((x.to(tl.float32) * rstd[:, None]).to(x.dtype).to(tl.float32) * gain).to(x.dtype)
    if ACT == 1:
        x = tl.maximum(x, 0.0).to(x.dtype)  # exact (the scalar would make it fp32)
    elif ACT == 2 or ACT == 3:
        x = _gelu(x, ACT == 3)
    elif ACT == 4:  # the row holds [gate | up], each in_features wide: silu(gate), rounded, times up
        y = x.to(tl.float32)
        up = _tile(x_ptr + in_features, r, k, rows, in_features, x_stride).to(tl.float32)
        x = ((y * tl.sigmoid(y)).to(x.dtype).to(tl.float32) * up).to(x.dtype)
    return x


@triton.jit
def _write(out_ptr, out, bias_ptr, res_ptr, r, n, split, rows, out_features, res_stride, BIAS: tl.constexpr,
           RESIDUAL: tl.constexpr):
    """Slice `split`'s sums `out` [BR, BN] fp32 (plus the bias with BIAS) into out [splits, rows, out_features],
    in its dtype; with RESIDUAL (one slice) the product rounded to that dtype plus the residual's rows (x + the
    product, as eager adds them). Returns what it stored."""
    if BIAS:
        out += tl.load(bias_ptr + n, mask=n < out_features, other=0.0).to(tl.float32)[None, :]
    keep = (r[:, None] < rows) & (n[None, :] < out_features)
    if RESIDUAL:
        out = out.to(out_ptr.dtype.element_ty).to(tl.float32)
        out += tl.load(res_ptr + r[:, None] * res_stride + n[None, :], mask=keep, other=0.0).to(tl.float32)
    offsets = split * rows * out_features + r[:, None] * out_features + n[None, :]
    out = out.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offsets, out, mask=keep)
    return out


@triton.jit
def _write_cache(k_ptr, v_ptr, write_ptr, out, r, n, rows, q_features, kv_width, cache_row_stride,
                 cache_head_stride, HEAD_DIM: tl.constexpr):
    """The key and value columns of a q/k/v product's sums `out` [BR, BN] (already in the buffers' dtype; outputs
    [q_features, + kv_width) are the keys, the next kv_width the values, head after head of HEAD_DIM) stored at the
    write position of each row's K and V buffers [rows, kv heads, length, HEAD_DIM]."""
    at = tl.load(write_ptr)
    j = n - q_features
    is_k = (j >= 0) & (j < kv_width)
    is_v = (j >= kv_width) & (j < 2 * kv_width)
    j = tl.where(is_v, j - kv_width, j)
    offsets = (r[:, None] * cache_row_stride + (j // HEAD_DIM)[None, :] * cache_head_stride + at * HEAD_DIM
               + (j % HEAD_DIM)[None, :])
    in_rows = (r < rows)[:, None]
    tl.store(k_ptr + offsets, out.to(k_ptr.dtype.element_ty), mask=in_rows & is_k[None, :])
    tl.store(v_ptr + offsets, out.to(v_ptr.dtype.element_ty), mask=in_rows & is_v[None, :])


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, gain_ptr, shift_ptr, res_ptr, k_ptr, v_ptr, write_ptr, rows,
                 out_features, in_features, x_stride, w_stride, res_stride, eps, q_features, kv_width,
                 cache_row_stride, cache_head_stride, HEAD_DIM: tl.constexpr, KV: tl.constexpr,
                 BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_F: tl.constexpr,
                 ONE_LOAD: tl.constexpr, K_PER_SPLIT: tl.constexpr, BIAS: tl.constexpr, NORM: tl.constexpr,
                 ACT: tl.constexpr, RESIDUAL: tl.constexpr, PDL: tl.constexpr, EARLY: tl.constexpr):
    tile, split = tl.program_id(0), tl.program_id(1)
    r = tl.arange(0, BLOCK_R)  # [BR]
    n = tile * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    first = split * K_PER_SPLIT
    k = first + tl.arange(0, BLOCK_K)  # [BK]
    if PDL and EARLY:  # the next kernel may start now (it waits for this one's end before it reads our output)
        tl.extra.cuda.gdc_launch_dependents()
    # the first weight tile before the wait for the kernel before (no kernel of the step writes weights)
    w = _tile(w_ptr, n, k, out_features, in_features, w_stride)  # [BN, BK]
    if PDL:
        tl.extra.cuda.gdc_wait()
    mean, rstd = tl.zeros((BLOCK_R,), tl.float32), tl.zeros((BLOCK_R,), tl.float32)
    if NORM != 0:
        mean, rstd = _row_stats(x_ptr, r, rows, in_features, x_stride, eps, NORM, BLOCK_R, BLOCK_F, ONE_LOAD)
    x = _input(x_ptr, r, k, rows, in_features, x_stride, mean, rstd, gain_ptr, shift_ptr, NORM, ACT)
    acc = x.to(tl.float32)[:, None, :] * w[None, :, :].to(tl.float32)
    for start in tl.range(first + BLOCK_K, first + K_PER_SPLIT, BLOCK_K):
        k = start + tl.arange(0, BLOCK_K)
        w = _tile(w_ptr, n, k, out_features, in_features, w_stride)
        x = _input(x_ptr, r, k, rows, in_features, x_stride, mean, rstd, gain_ptr, shift_ptr, NORM, ACT)
        acc += x.to(tl.float32)[:, None, :] * w[None, :, :].to(tl.float32)
    if PDL and not EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    out = _write(out_ptr, tl.sum(acc, axis=2), bias_ptr, res_ptr, r, n, split, rows, out_features, res_stride,
                 BIAS, RESIDUAL)
    if KV:
        _write_cache(k_ptr, v_ptr, write_ptr, out, r, n, rows, q_features, kv_width, cache_row_stride,
                     cache_head_stride, HEAD_DIM)


@triton.jit
def _gemv_dot_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, gain_ptr, shift_ptr, res_ptr, k_ptr, v_ptr, write_ptr,
                     rows, out_features, in_features, x_stride, w_stride, res_stride, eps, q_features, kv_width,
                     cache_row_stride, cache_head_stride, HEAD_DIM: tl.constexpr, KV: tl.constexpr,
                     BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_F: tl.constexpr,
                     ONE_LOAD: tl.constexpr, K_PER_SPLIT: tl.constexpr, BIAS: tl.constexpr, NORM: tl.constexpr,
                     ACT: tl.constexpr, RESIDUAL: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr,
                     EARLY: tl.constexpr):
    tile, split = tl.program_id(0), tl.program_id(1)
    r = tl.arange(0, BLOCK_R)  # [BR]: the rows, padded with zeros to a dot's 16
    n = tile * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    first = split * K_PER_SPLIT
    k = first + tl.arange(0, BLOCK_K)  # [BK]
    if PDL and EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    w = _tile(w_ptr, n, k, out_features, in_features, w_stride)  # [BN, BK], before the wait as in `_gemv_kernel`
    if PDL:
        tl.extra.cuda.gdc_wait()
    mean, rstd = tl.zeros((BLOCK_R,), tl.float32), tl.zeros((BLOCK_R,), tl.float32)
    if NORM != 0:
        mean, rstd = _row_stats(x_ptr, r, rows, in_features, x_stride, eps, NORM, BLOCK_R, BLOCK_F, ONE_LOAD)
    x = _input(x_ptr, r, k, rows, in_features, x_stride, mean, rstd, gain_ptr, shift_ptr, NORM, ACT)  # [BR, BK]
    acc = tl.dot(x, tl.trans(w), input_precision=PRECISION, out_dtype=tl.float32)  # [BR, BN]
    for start in tl.range(first + BLOCK_K, first + K_PER_SPLIT, BLOCK_K):
        k = start + tl.arange(0, BLOCK_K)
        w = _tile(w_ptr, n, k, out_features, in_features, w_stride)
        x = _input(x_ptr, r, k, rows, in_features, x_stride, mean, rstd, gain_ptr, shift_ptr, NORM, ACT)
        acc = tl.dot(x, tl.trans(w), acc, input_precision=PRECISION, out_dtype=tl.float32)
    if PDL and not EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    out = _write(out_ptr, acc, bias_ptr, res_ptr, r, n, split, rows, out_features, res_stride, BIAS, RESIDUAL)
    if KV:
        _write_cache(k_ptr, v_ptr, write_ptr, out, r, n, rows, q_features, kv_width, cache_row_stride,
                     cache_head_stride, HEAD_DIM)


# the activations `gemv` applies to its input as it loads it (`_input`'s ACT), by name: F.gelu's `approximate`
# names its two GELUs ("none": erf, "tanh"); "swiglu": silu(gate) * up of an input [.., 2 x in] holding both
ACTIVATION_CODES = {None: 0, "relu": 1, "tanh": 2, "none": 3, "swiglu": 4}
NORM_CODES = {None: 0, "layer": 1, "rms": 2}  # the norms `gemv` applies to its input first (`Norm.kind`)
STATS_VALUES = 8192  # the most values (rows x features) `_row_stats` loads at once


class Norm(NamedTuple):
    """A norm `gemv` applies to each input row before the product (over all its features, in fp32): `kind`
    "layer" (nn.LayerNorm with a gain and a shift) or "rms" (HF's Llama / T5 RMS norm: a gain, no shift)."""

    kind: str
    gain: torch.Tensor
    shift: torch.Tensor | None
    eps: float


class Cache(NamedTuple):
    """Where `gemv` also writes the key and value columns of a q/k/v product (outputs [q_features, + kv heads x
    head size) the keys, the next as many the values): at the write position `write` [1] of the buffers `keys`,
    `values` [rows, kv heads, length, head size] (contiguous)."""

    keys: torch.Tensor
    values: torch.Tensor
    write: torch.Tensor
    q_features: int


def _gemv_launch(x, weight, bias, out, block_n: int, block_k: int, splits: int, k_per_split: int, warps: int,
                 dot: bool, activation: str | None, norm: Norm | None = None, residual: torch.Tensor | None = None,
                 cache: Cache | None = None):
    rows, in_features = x.shape[0], weight.shape[1]
    out_features = weight.shape[0]
    grid = (triton.cdiv(out_features, block_n), splits)
    gain, shift = (x, x) if norm is None else (norm.gain, x if norm.shift is None else norm.shift)
    keys, values, write, q_features = (x, x, x, 0) if cache is None else cache
    kv_width = 0 if cache is None else keys.shape[1] * keys.shape[3]
    args = (x, weight, x if bias is None else bias, out, gain, shift, x if residual is None else residual, keys, values,
            write, rows, out_features, in_features, x.stride(0), weight.stride(0),
            0 if residual is None else residual.stride(0), 0.0 if norm is None else float(norm.eps), q_features,
            kv_width, 0 if cache is None else keys.stride(0), 0 if cache is None else keys.stride(1))
    common = dict(HEAD_DIM=1 if cache is None else keys.shape[3], KV=cache is not None)
    common.update(BLOCK_N=block_n, BLOCK_K=block_k, K_PER_SPLIT=k_per_split, BIAS=bias is not None,
                  NORM=NORM_CODES[None if norm is None else norm.kind], ACT=ACTIVATION_CODES[activation],
                  RESIDUAL=residual is not None, num_warps=warps, **_launch(x.device, norm is not None))
    block_r = 16 if dot else max(1, triton.next_power_of_2(rows))
    # a norm's statistics: every row's features in one load where that is at most STATS_VALUES values
    common["BLOCK_F"] = max(block_k, min(triton.next_power_of_2(in_features), STATS_VALUES // block_r))
    common["ONE_LOAD"] = common["BLOCK_F"] >= in_features
    if dot:  # fp32 inputs summed as exact fp32 products (not TF32's rounded ones)
        _gemv_dot_kernel[grid](*args, BLOCK_R=block_r, PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
                               **common)
    else:
        _gemv_kernel[grid](*args, BLOCK_R=block_r, **common)


def _launch(device: torch.device, norm: bool = False) -> dict:
    """The launch arguments of one of our kernels on this device: with programmatic dependent launch where it is on
    (`NNDF.backends.torch.compile.programmatic_launch`; the kernels then wait for the kernel before them on the
    device), else none; `EARLY`: it lets the next kernel start as soon as it starts itself, else once its loads are
    done (`compile.EARLY_LAUNCH`; `norm`: a GEMV that normalises its input)."""
    if not programmatic_launch(device):
        return dict(PDL=False, EARLY=False)
    early = compile_options.EARLY_LAUNCH == "all" or (compile_options.EARLY_LAUNCH == "unnormed" and not norm)
    return dict(PDL=True, EARLY=early, launch_pdl=True)


@custom_op("nndf::gemv_whole", mutates_args=())
def gemv_whole(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, block_n: int, block_k: int,
               warps: int, dot: bool, activation: str | None, dtype: torch.dtype, norm_kind: str | None = None,
               gain: torch.Tensor | None = None, shift: torch.Tensor | None = None, eps: float = 0.0,
               residual: torch.Tensor | None = None) -> torch.Tensor:
    """x [rows, in] (features contiguous; norm(x) with `norm_kind` (`Norm`), then activation(x)) times weight
    [out, in]^T + bias in one sum per output (through dots with `dot`): [rows, out] in `dtype`, summed in fp32 and
    rounded once (what the partial sums summed and cast give); plus `residual` [rows, out] (after that rounding)."""
    return _whole(x, weight, bias, block_n, block_k, warps, dot, activation, dtype, norm_kind, gain, shift, eps,
                  residual)


def _whole(x, weight, bias, block_n, block_k, warps, dot, activation, dtype, norm_kind, gain, shift, eps, residual,
           cache: Cache | None = None) -> torch.Tensor:
    """`gemv_whole`'s and `gemv_cache`'s launch: the product in one slice, in `dtype`."""
    out = x.new_empty((x.shape[0], weight.shape[0]), dtype=dtype)
    norm = None if norm_kind is None else Norm(norm_kind, gain, shift, eps)
    _gemv_launch(x, weight, bias, out, block_n, block_k, 1, triton.cdiv(weight.shape[1], block_k) * block_k, warps,
                 dot, activation, norm, residual, cache)
    return out


@gemv_whole.register_fake
def _(x, weight, bias, block_n, block_k, warps, dot, activation, dtype, norm_kind=None, gain=None, shift=None,
      eps=0.0, residual=None):
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=dtype)


@custom_op("nndf::gemv_cache", mutates_args=("keys", "values"))
def gemv_cache(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, block_n: int, block_k: int,
               warps: int, dot: bool, activation: str | None, dtype: torch.dtype, keys: torch.Tensor,
               values: torch.Tensor, write: torch.Tensor, q_features: int, norm_kind: str | None = None,
               gain: torch.Tensor | None = None, shift: torch.Tensor | None = None, eps: float = 0.0,
               residual: torch.Tensor | None = None) -> torch.Tensor:
    """`gemv_whole`, its key and value columns also written into `keys` / `values` at `write` (`Cache`)."""
    return _whole(x, weight, bias, block_n, block_k, warps, dot, activation, dtype, norm_kind, gain, shift, eps,
                  residual, Cache(keys, values, write, q_features))


@gemv_cache.register_fake
def _(x, weight, bias, block_n, block_k, warps, dot, activation, dtype, keys, values, write, q_features,
      norm_kind=None, gain=None, shift=None, eps=0.0, residual=None):
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=dtype)


@custom_op("nndf::gemv_partials", mutates_args=())
def gemv_partials(x: torch.Tensor, weight: torch.Tensor, block_n: int, block_k: int, splits: int, k_per_split: int,
                  warps: int, dot: bool = False, activation: str | None = None, norm_kind: str | None = None,
                  gain: torch.Tensor | None = None, shift: torch.Tensor | None = None,
                  eps: float = 0.0) -> torch.Tensor:
    """x [rows, in] (features contiguous; norm(x) with `norm_kind`, then activation(x), as `gemv_whole`) times
    weight [out, in]^T in `splits` partial sums (through dots with `dot`): fp32 [splits, rows, out]."""
    out = torch.empty((splits, x.shape[0], weight.shape[0]), dtype=torch.float32, device=x.device)
    norm = None if norm_kind is None else Norm(norm_kind, gain, shift, eps)
    _gemv_launch(x, weight, None, out, block_n, block_k, splits, k_per_split, warps, dot, activation, norm)
    return out


@gemv_partials.register_fake
def _(x, weight, block_n, block_k, splits, k_per_split, warps, dot=False, activation=None, norm_kind=None,
      gain=None, shift=None, eps=0.0):
    return x.new_empty((splits, x.shape[0], weight.shape[0]), dtype=torch.float32)


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         config: GemvConfig | None = None, relu: bool = False, dtype: torch.dtype | None = None,
         norm: Norm | tuple | None = None, activation: str | None = None,
         residual: torch.Tensor | None = None, cache: Cache | None = None) -> torch.Tensor:
    """x [..., in] times weight [out, in]^T + bias, in `dtype` (x's by default), summed in fp32 (the same products
    as the reduction form of `CausalLM.fused_step.product`). `config`: the tiling, `gemv_config`'s by default.
    What the kernel does as it loads x, so that no kernel of its own runs before it: `norm` (`Norm`, or a tuple of
    its fields: each row normalised over all its features; every program computes its rows' statistics itself)
    and then `activation` (`ACTIVATION_CODES`; `relu` is "relu"), each rounded to x's dtype as the eager op's
    output is. `residual` [..., out]: returns residual + the product (the product rounded to `dtype` first, as
    eager adds them). Unsplit, the kernel adds the bias and the residual and writes the output's dtype itself, so
    what reads the product (a q the attention kernel takes as it is, the next layer) needs no kernel of its own to
    sum and cast it first; split, the partial sums' sum, bias and residual are plain ops inductor fuses with what
    follows. `cache` (`Cache`, one row of x a row of the buffers): the keys and values among the outputs also
    written into the cache (by the kernel where unsplit, else by plain ops after it)."""
    dtype = dtype or x.dtype
    activation = "relu" if relu else activation
    lead, in_features = x.shape[:-1], weight.shape[1]
    flat = x.reshape(-1, x.shape[-1])
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    if config is None:
        rows = flat.shape[0]
        if uses_dot(rows, flat.dtype, weight.dtype):
            config = dot_config(rows, weight.shape[0], in_features,
                                **(DOT_TILING if x.is_cuda else dict(INTERPRETED, max_splits=None)))
        else:
            tiling = TILING if x.is_cuda else INTERPRETED
            if (residual is not None or cache is not None) and x.is_cuda and WHOLE_TILING is not None:
                tiling = {**tiling, **WHOLE_TILING}
            if x.is_cuda and WIDE_WARPS is not None and WIDE_WARPS[0] <= weight.numel() < WIDE_WARPS[1]:
                tiling = {**tiling, "warps": WIDE_WARPS[2]}
            config = gemv_config(rows, weight.shape[0], in_features, **tiling)
    norm_args = () if norm is None else (*Norm(*norm)[:3], float(norm[3]))
    if config.splits == 1:
        res = None if residual is None else residual.reshape(-1, weight.shape[0])
        if res is not None and res.stride(-1) != 1:
            res = res.contiguous()
        extra = {} if res is None else dict(residual=res)
        tiling = (config.block_n, config.block_k, config.warps, config.dot, activation, dtype)
        if cache is None:
            out = gemv_whole(flat, weight, bias, *tiling, *norm_args, **extra)
        else:
            out = gemv_cache(flat, weight, bias, *tiling, cache.keys, cache.values, cache.write, cache.q_features,
                             *norm_args, **extra)
        return out.reshape(*lead, -1)
    partials = gemv_partials(flat, weight, config.block_n, config.block_k, config.splits, config.k_per_split,
                             config.warps, config.dot, activation, *norm_args)
    out = partials.sum(0)
    if bias is not None:
        out = out + bias.float()
    out = out.to(dtype)
    if residual is not None:
        out = out + residual.reshape(out.shape)
    if cache is not None:
        write_kv_columns(out, *cache)
    return out.reshape(*lead, weight.shape[0])


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, valid_ptr, write_ptr, slopes_ptr, offsets_ptr, bias_ptr, out_ptr, length,
                      scale, q_row_stride, k_row_stride, k_head_stride, valid_row_stride, offsets_row_stride,
                      bias_row_stride, bias_head_stride, out_row_stride, GROUP: tl.constexpr, DIM: tl.constexpr,
                      BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr, WINDOW: tl.constexpr, ALIBI: tl.constexpr,
                      BIAS: tl.constexpr, PDL: tl.constexpr, EARLY: tl.constexpr):
    if PDL and EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    if PDL:  # every input may be the kernel before's output
        tl.extra.cuda.gdc_wait()
    row, head = tl.program_id(0), tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    in_d = d < DIM
    q = tl.load(q_ptr + row * q_row_stride + head * DIM + d, mask=in_d, other=0.0).to(tl.float32)  # [BD]
    end = tl.load(write_ptr) + 1  # columns up to the write position
    first = 0
    if WINDOW > 0:
        first = tl.maximum(end - WINDOW, 0)
    base = row * k_row_stride + (head // GROUP) * k_head_stride
    m = tl.full((), float("-inf"), tl.float32)  # running max, sum of exp and p.V so far (online softmax)
    total = tl.zeros((), tl.float32)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for start in tl.range(first, end, BLOCK_L):  # from the window's first column: one block covers a window
        c = start + tl.arange(0, BLOCK_L)  # [BL]
        keep = (c >= first) & (c < end) & (c < length)
        keep &= tl.load(valid_ptr + row * valid_row_stride + c, mask=keep, other=0) != 0
        kv_mask = keep[:, None] & in_d[None, :]
        keys = tl.load(k_ptr + base + c[:, None] * DIM + d[None, :], mask=kv_mask, other=0.0)  # [BL, BD]
        values = tl.load(v_ptr + base + c[:, None] * DIM + d[None, :], mask=kv_mask, other=0.0)
        s = tl.sum(q[None, :] * keys.to(tl.float32), axis=1) * scale  # [BL]
        if ALIBI:  # + slope_h * (key position - query position)
            s += tl.load(slopes_ptr + head) * tl.load(offsets_ptr + row * offsets_row_stride + c, mask=keep, other=0.0)
        if BIAS:  # + bias[row, head, column]
            s += tl.load(bias_ptr + row * bias_row_stride + head * bias_head_stride + c, mask=keep, other=0.0)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no column kept yet: nothing to rescale
        p = tl.exp(s - m_safe)
        correction = tl.exp(m - m_safe)
        acc = acc * correction + tl.sum(p[:, None] * values.to(tl.float32), axis=0)
        total = total * correction + tl.sum(p, axis=0)
        m = m_new
    if PDL and not EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(out_ptr + row * out_row_stride + head * DIM + d, (acc / total).to(out_ptr.dtype.element_ty), mask=in_d)


@custom_op("nndf::decode_attention", mutates_args=())
def decode_attention_op(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor,
                        write: torch.Tensor, slopes: torch.Tensor | None, offsets: torch.Tensor | None,
                        bias: torch.Tensor | None, scale: float, window: int, block_l: int, warps: int) -> torch.Tensor:
    """See `decode_attention`."""
    rows, heads, dim = q.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    out = torch.empty_like(q)
    alibi, biased = slopes is not None, bias is not None
    _attention_kernel[(rows, heads)](
        q, keys, values, valid, write, slopes if alibi else q, offsets if alibi else q, bias if biased else q, out,
        length, scale, q.stride(0), keys.stride(0), keys.stride(1), valid.stride(0),
        offsets.stride(0) if alibi else 0, *_bias_strides(bias), out.stride(0), GROUP=heads // kv_heads, DIM=dim,
        BLOCK_D=triton.next_power_of_2(dim), BLOCK_L=block_l, WINDOW=window, ALIBI=alibi, BIAS=biased,
        num_warps=warps, **_launch(q.device))
    return out


@decode_attention_op.register_fake
def _(q, keys, values, valid, write, slopes, offsets, bias, scale, window, block_l, warps):
    return torch.empty_like(q)


def _bias_strides(bias: torch.Tensor | None) -> tuple[int, int]:
    """The kernels' (row, head) strides of an additive bias [1 or R, H, L] (one row: shared by every row)."""
    if bias is None:
        return 0, 0
    return (0 if bias.shape[0] == 1 else bias.stride(0)), bias.stride(1)


def _additive(bias: torch.Tensor | None) -> torch.Tensor | None:
    """An additive bias as the kernels read it: fp32, its columns contiguous."""
    if bias is None:
        return None
    bias = bias.float()
    return bias if bias.stride(-1) == 1 else bias.contiguous()


@triton.jit
def _attention_split_kernel(q_ptr, k_ptr, v_ptr, valid_ptr, write_ptr, slopes_ptr, offsets_ptr, bias_ptr, part_ptr,
                            stats_ptr, length, scale, q_row_stride, k_row_stride, k_head_stride, valid_row_stride,
                            offsets_row_stride, bias_row_stride, bias_head_stride, GROUP: tl.constexpr,
                            DIM: tl.constexpr, BLOCK_D: tl.constexpr, CHUNK: tl.constexpr, WINDOW: tl.constexpr,
                            ALIBI: tl.constexpr, BIAS: tl.constexpr, PDL: tl.constexpr, EARLY: tl.constexpr):
    if PDL and EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    if PDL:  # every input may be the kernel before's output
        tl.extra.cuda.gdc_wait()
    row, head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows, heads = tl.num_programs(0), tl.num_programs(1)
    d = tl.arange(0, BLOCK_D)
    in_d = d < DIM
    q = tl.load(q_ptr + row * q_row_stride + head * DIM + d, mask=in_d, other=0.0).to(tl.float32)  # [BD]
    end = tl.load(write_ptr) + 1  # columns up to the write position
    first = 0
    if WINDOW > 0:
        first = tl.maximum(end - WINDOW, 0)
    c = split * CHUNK + tl.arange(0, CHUNK)  # this program's columns [C]
    keep = (c >= first) & (c < end) & (c < length)
    keep &= tl.load(valid_ptr + row * valid_row_stride + c, mask=keep, other=0) != 0
    base = row * k_row_stride + (head // GROUP) * k_head_stride
    kv_mask = keep[:, None] & in_d[None, :]
    keys = tl.load(k_ptr + base + c[:, None] * DIM + d[None, :], mask=kv_mask, other=0.0)  # [C, BD]
    values = tl.load(v_ptr + base + c[:, None] * DIM + d[None, :], mask=kv_mask, other=0.0)
    s = tl.sum(q[None, :] * keys.to(tl.float32), axis=1) * scale  # [C]
    if ALIBI:  # + slope_h * (key position - query position)
        s += tl.load(slopes_ptr + head) * tl.load(offsets_ptr + row * offsets_row_stride + c, mask=keep, other=0.0)
    if BIAS:  # + bias[row, head, column]
        s += tl.load(bias_ptr + row * bias_row_stride + head * bias_head_stride + c, mask=keep, other=0.0)
    s = tl.where(keep, s, float("-inf"))
    m = tl.max(s, axis=0)
    p = tl.exp(s - tl.where(m == float("-inf"), 0.0, m))  # 0 at every column not kept
    at = (split * rows + row) * heads + head
    if PDL and not EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(part_ptr + at * DIM + d, tl.sum(p[:, None] * values.to(tl.float32), axis=0), mask=in_d)
    tl.store(stats_ptr + at * 2, m)
    tl.store(stats_ptr + at * 2 + 1, tl.sum(p, axis=0))


@custom_op("nndf::decode_attention_split", mutates_args=())
def decode_attention_split_op(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor,
                              write: torch.Tensor, slopes: torch.Tensor | None, offsets: torch.Tensor | None,
                              bias: torch.Tensor | None, scale: float, window: int, chunk: int,
                              warps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """See `decode_attention_split`: the partial sums p.V [S, R, H, D] and (max score, sum of exp) [S, R, H, 2],
    fp32, of the S column chunks."""
    rows, heads, dim = q.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    splits = triton.cdiv(length, chunk)
    part = torch.empty((splits, rows, heads, dim), dtype=torch.float32, device=q.device)
    stats = torch.empty((splits, rows, heads, 2), dtype=torch.float32, device=q.device)
    alibi, biased = slopes is not None, bias is not None
    _attention_split_kernel[(rows, heads, splits)](
        q, keys, values, valid, write, slopes if alibi else q, offsets if alibi else q, bias if biased else q, part,
        stats, length, scale, q.stride(0), keys.stride(0), keys.stride(1), valid.stride(0),
        offsets.stride(0) if alibi else 0, *_bias_strides(bias), GROUP=heads // kv_heads, DIM=dim,
        BLOCK_D=triton.next_power_of_2(dim), CHUNK=chunk, WINDOW=window, ALIBI=alibi, BIAS=biased, num_warps=warps,
        **_launch(q.device))
    return part, stats


@decode_attention_split_op.register_fake
def _(q, keys, values, valid, write, slopes, offsets, bias, scale, window, chunk, warps):
    splits = -(-keys.shape[2] // chunk)
    shape = (splits, *q.shape[:2])
    return q.new_empty((*shape, q.shape[2]), dtype=torch.float32), q.new_empty((*shape, 2), dtype=torch.float32)


def _heads_packed(q: torch.Tensor) -> torch.Tensor:
    """q [R, H, D] as the attention kernels read it: each row's heads packed (a row at any stride, such as q's
    columns of a fused q/k/v product, needs no copy first)."""
    return q if q.stride(2) == 1 and q.stride(1) == q.shape[2] else q.contiguous()


# programs `decode_attention_split` aims at by default: two per SM of an H100 (132)
SPLIT_PROGRAMS = 264


def attention_chunk(rows: int, heads: int, length: int, programs: int = SPLIT_PROGRAMS) -> int:
    """Columns a program of `decode_attention_split` takes: a power of two from 16 to 256, about `programs`
    programs over the rows, heads and the buffer's columns."""
    return min(256, max(16, triton.next_power_of_2(triton.cdiv(rows * heads * length, programs))))


def decode_attention_split(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor,
                           write: torch.Tensor, scale: float, window: int | None = None, chunk: int = 0,
                           warps: int = 0, alibi: tuple | None = None,
                           bias: torch.Tensor | None = None) -> torch.Tensor:
    """`decode_attention` with the buffer's columns cut into chunks of `chunk` (0: `attention_chunk`), one program
    per row, query head and chunk (flash decoding: a head's columns read by many programs at once, where one
    program per head leaves most of the GPU idle: few heads, long buffers). Each program's partial softmax sums
    are combined here in plain ops, which inductor fuses with what follows. Chunks past the write position do no
    reads."""
    assert keys.is_contiguous() and values.is_contiguous() and keys.shape == values.shape
    rows, heads, dim = q.shape
    chunk = chunk or attention_chunk(rows, heads, keys.shape[2])
    warps = warps or (4 if chunk * triton.next_power_of_2(dim) <= 8192 else 8)
    slopes, offsets = (None, None) if alibi is None else (t.float().contiguous() for t in alibi)
    part, stats = decode_attention_split_op(_heads_packed(q), keys, values, valid, write, slopes, offsets,
                                            _additive(bias), float(scale), window or 0, chunk, warps)
    best, total = stats[..., 0], stats[..., 1]  # [S, R, H]
    weight = torch.exp(best - best.max(0).values)  # 0 for chunks with no column kept
    out = (weight[..., None] * part).sum(0) / (weight * total).sum(0)[..., None]
    return out.to(q.dtype)


def attention_block(dim: int) -> int:
    """Columns a load of `decode_attention` takes by default for this head size: 256 at 64, 128 at 128 (the
    fastest measured at Qwen2.5-0.5B's and Mistral-7B's head sizes on an H100), about 16k values a load above
    (64 at GPT-J's 256)."""
    return min(256, max(16, 16384 // triton.next_power_of_2(dim)))


def attention_columns(dim: int) -> int:
    """The longest buffer `decode_attention` serves a step well for this head size: four loads of its default
    block. One program walks the columns one load after another, so its time grows with the length: on an H100,
    over 4096 columns it took 45 us (head size 64) and 124 us (128) against 18 and 69 for inductor's plain-op
    form, and a version in chunks over programs was no better at 64 (tools/bench/kernel_bench.py)."""
    return 4 * attention_block(dim)


def decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor,
                     write: torch.Tensor, scale: float, window: int | None = None, block_l: int = 0,
                     warps: int = 0, alibi: tuple | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """One query per row and head, q [R, H, D], over the buffers keys / values [R, KVH, L, D] (contiguous), the
    columns `valid` [R, L] keeps among those up to `write` [1] (and, with a `window`, after write - window):
    [R, H, D] in q's dtype, softmax in fp32. Query heads in groups of H / KVH share a key/value head. `alibi`:
    (slopes [H], offsets [R, L]) fp32, each score plus slope_h * offsets[r, column] (BLOOM's ALiBi: a key's
    position minus the query's). `bias`: an additive bias [1 or R, H, L], each score plus bias[r, h, column] (T5's
    relative position bias; one row: shared by every row). A row with no column kept gives NaN, as a softmax over
    nothing does. `block_l` columns a load and `warps` per program (0: by head size, `attention_block`, the
    fastest measured at Qwen2.5-0.5B's 64 and Mistral-7B's 128 on an H100; one program walks the written columns
    in blocks, so its time grows with the written length: `attention_columns`)."""
    assert keys.is_contiguous() and values.is_contiguous() and keys.shape == values.shape
    dim = q.shape[-1]
    block_l = block_l or attention_block(dim)
    warps = warps or (4 if dim <= 64 else 8)
    slopes, offsets = (None, None) if alibi is None else (t.float().contiguous() for t in alibi)
    return decode_attention_op(_heads_packed(q), keys, values, valid, write, slopes, offsets, _additive(bias),
                               float(scale), window or 0, block_l, warps)
