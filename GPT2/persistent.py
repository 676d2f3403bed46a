"""GPT-2's layers as one persistent Triton kernel, for a one-row step (`FusedSettings.persistent_layers`).

The fused step runs five kernels a layer (the q/k/v product, the attention, three products), each waiting for the
one before: at gpt2-xl (48 layers, 5-20 MB products) a step of 244 kernels reads its 3.1 GB at ~1.7 TB/s, 40% of
an H200's copy bandwidth, and no tiling of our GEMV moved that by more than 2% (docs/PERFORMANCE.md). Here every
layer runs inside ONE launch of `P` programs, all resident at once (at most one a streaming multiprocessor), which
walk the layers together and meet at a device-wide barrier between a layer's five phases:

    1  qkv = layer_norm_1(x) @ W_attn + b          (each program a contiguous range of output rows; the key and
                                                   value columns also written into the layer's cache at `write`)
    2  a = softmax(q.K / sqrt(d)) . V over the columns `valid` keeps   (one program a head)
    3  x = x + a @ W_proj + b                       (each program its rows of x: no other program reads them here)
    4  h = layer_norm_2(x) @ W_fc + b
    5  x = x + gelu(h) @ W_out + b

A barrier is a counter, in two halves: a program that finished a phase's stores arrives (one thread adds 1 with
release semantics) and goes on to load the first weight tile of its next phase, which depends on no other program;
only then it waits (polls with acquire semantics until all `P` programs of that phase have arrived; the counter is
zeroed before each launch, so the n-th wait is for n x P). Within a phase each program keeps the load of its next
weight tile in flight while it sums the current one. Activations written by other programs are read past the L1
cache.

Values: the same operations in the same precision as the step on our GEMV with `gemv_fusion` (each norm and GELU
rounded to the activations' dtype, products summed in fp32 and rounded once, plus the bias, then the residual), so
the tokens are HF's in fp32 (tests). Under Triton's interpreter (the CPU tests) programs run one after another, so
the kernel runs as one program there (every barrier then passes at once); the multi-program barrier runs on CUDA
only.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from NNDF.backends.torch.kernels import gelu

# the kernel's tiling on CUDA: `tile` weight elements a load (BLOCK_N rows x BLOCK_K features, BLOCK_K the
# product's input width rounded up to a power of two, at most `block_k`), `warps` a program, the attention's
# `block_l` cache columns a load (one program walks a head's columns alone: few, wide loads); `ahead`: each
# load of the next tile issued before the current one is summed, `early`: a phase's first tile loaded before the
# program waits at the barrier for the phase before (weights never depend on it; only activations do); `poll`:
# how a waiting program reads the barrier's count, "atomics" or "loads" (`_wait`)
TILING = dict(tile=16384, block_k=2048, warps=8, block_l=128, ahead=True, early=True, poll="atomics")
INTERPRETED = dict(tile=512, block_k=32, warps=1, block_l=32, ahead=True, early=True, poll="atomics")
GELU_CODES = {"tanh": 2, "none": 3}  # F.gelu's `approximate` -> how the kernel applies it
MAX_SPINS = tl.constexpr(1 << 20)  # polls of a barrier before a program counts it failed (about a second)


@triton.jit
def _arrive(counter_ptr):
    """This program's stores so far made visible to every program that waits past its arrival (`_wait`)."""
    tl.debug_barrier()
    tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")


@triton.jit
def _wait(counter_ptr, target, POLL_LOADS: tl.constexpr):
    """Back once `target` arrivals are counted at counter_ptr[0]: polled with acquiring atomics, or with
    POLL_LOADS with plain loads past the caches and one acquiring atomic once they see it. A program that polls
    MAX_SPINS times in vain counts a failure at counter_ptr[1] and goes on, and no barrier waits once one has
    failed: a broken barrier gives wrong values and a count, never a hung GPU."""
    if POLL_LOADS:
        seen = tl.load(counter_ptr, volatile=True)
    else:
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
    failed = tl.atomic_add(counter_ptr + 1, 0, sem="relaxed", scope="gpu")
    spins = seen * 0
    while (seen < target) & (failed == 0) & (spins < MAX_SPINS):
        if POLL_LOADS:
            seen = tl.load(counter_ptr, volatile=True)
        else:
            seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        spins += 1
    if POLL_LOADS:
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
    if (seen < target) & (failed == 0):
        tl.atomic_add(counter_ptr + 1, 1, sem="relaxed", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _tile(w_ptr, t, first, last, K, chunks, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Tile t of rows [first, last) of a weight [N, K]: rows first + (t // chunks) * BLOCK_N ..., features
    (t % chunks) * BLOCK_K ...; zeros past either end (a t past the last tile loads nothing)."""
    n = first + (t // chunks) * BLOCK_N + tl.arange(0, BLOCK_N)
    k = (t % chunks) * BLOCK_K + tl.arange(0, BLOCK_K)
    return tl.load(w_ptr + n[:, None] * K + k[None, :], mask=(n < last)[:, None] & (k < K)[None, :], other=0.0)


@triton.jit
def _stats(x_ptr, E, eps, BLOCK_E: tl.constexpr):
    """x's mean and 1 / standard deviation over its E features (a layer norm's), in fp32."""
    e = tl.arange(0, BLOCK_E)
    x = tl.load(x_ptr + e, mask=e < E, other=0.0, cache_modifier=".cg").to(tl.float32)
    mean = tl.sum(x, axis=0) / E
    d = tl.where(e < E, x - mean, 0.0)
    return mean, 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / E + eps)


@triton.jit
def _input(x_ptr, k, K, mean, rstd, gain_ptr, shift_ptr, NORM: tl.constexpr, ACT: tl.constexpr):
    """The product's input at features `k`, in the activations' dtype: x, layer_norm(x) or gelu(x), each rounded
    as the eager op's output is."""
    in_k = k < K
    x = tl.load(x_ptr + k, mask=in_k, other=0.0, cache_modifier=".cg")
    if NORM:
        gain = tl.load(gain_ptr + k, mask=in_k, other=0.0).to(tl.float32)
        shift = tl.load(shift_ptr + k, mask=in_k, other=0.0).to(tl.float32)
        x = ((x.to(tl.float32) - mean) * rstd * gain + shift).to(x.dtype)
    if ACT != 0:
        x = gelu(x, ACT == 3)
    return x


@triton.jit
def _product(x_ptr, w_ptr, b_ptr, out_ptr, res_ptr, gain_ptr, shift_ptr, k_ptr, v_ptr, at, pid, programs, N, K,
             E, eps, counter_ptr, target, HEAD_DIM: tl.constexpr, cache_stride, NORM: tl.constexpr,
             ACT: tl.constexpr, RESIDUAL: tl.constexpr, KV: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr, BLOCK_E: tl.constexpr, AHEAD: tl.constexpr, EARLY: tl.constexpr,
             POLL_LOADS: tl.constexpr):
    """This program's range of the N outputs of input [K] times weight [N, K] + bias, once `target` arrivals are
    counted (the phase before wrote the input): stored in out (plus the residual's same rows with RESIDUAL); with
    KV the outputs [E, 2E) and [2E, 3E) also stored as the keys and values at column `at` of the caches
    [heads, length, HEAD_DIM] (head stride `cache_stride`). The rows are walked in tiles, feature chunks inner."""
    first, last = pid * N // programs, (pid + 1) * N // programs
    chunks = tl.cdiv(K, BLOCK_K)
    tiles = tl.cdiv(last - first, BLOCK_N) * chunks
    if EARLY:
        w = _tile(w_ptr, 0, first, last, K, chunks, BLOCK_N, BLOCK_K)
    _wait(counter_ptr, target, POLL_LOADS)
    if not EARLY:
        w = _tile(w_ptr, 0, first, last, K, chunks, BLOCK_N, BLOCK_K)
    mean, rstd = 0.0, 0.0
    if NORM:
        mean, rstd = _stats(x_ptr, E, eps, BLOCK_E)
    x = _input(x_ptr, tl.arange(0, BLOCK_K), K, mean, rstd, gain_ptr, shift_ptr, NORM, ACT)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for t in range(tiles):
        if AHEAD:
            following = _tile(w_ptr, t + 1, first, last, K, chunks, BLOCK_N, BLOCK_K)
            x_following = _input(x_ptr, ((t + 1) % chunks) * BLOCK_K + tl.arange(0, BLOCK_K), K, mean, rstd,
                                 gain_ptr, shift_ptr, NORM, ACT)
        acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
        if not AHEAD:
            following = _tile(w_ptr, t + 1, first, last, K, chunks, BLOCK_N, BLOCK_K)
            x_following = _input(x_ptr, ((t + 1) % chunks) * BLOCK_K + tl.arange(0, BLOCK_K), K, mean, rstd,
                                 gain_ptr, shift_ptr, NORM, ACT)
        done = t % chunks == chunks - 1
        if done:
            n = first + (t // chunks) * BLOCK_N + tl.arange(0, BLOCK_N)
            _store(acc, n, last, b_ptr, out_ptr, res_ptr, k_ptr, v_ptr, at, E, cache_stride, HEAD_DIM, RESIDUAL, KV)
        acc = tl.where(done, 0.0, acc)
        w, x = following, x_following


@triton.jit
def _store(acc, n, last, b_ptr, out_ptr, res_ptr, k_ptr, v_ptr, at, E, cache_stride, HEAD_DIM: tl.constexpr,
           RESIDUAL: tl.constexpr, KV: tl.constexpr):
    """Outputs n (those under `last`) of a product summed in fp32 (`acc`): plus the bias, rounded, plus the
    residual with RESIDUAL and rounded again; with KV also written as keys and values (`_product`)."""
    in_n = n < last
    out = (acc + tl.load(b_ptr + n, mask=in_n, other=0.0).to(tl.float32)).to(out_ptr.dtype.element_ty)
    if RESIDUAL:
        residual = tl.load(res_ptr + n, mask=in_n, other=0.0, cache_modifier=".cg").to(tl.float32)
        out = (out.to(tl.float32) + residual).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + n, out, mask=in_n)
    if KV:
        j = n - E
        is_k = in_n & (j >= 0) & (j < E)
        is_v = in_n & (j >= E)
        j = tl.where(is_v, j - E, j)
        offsets = (j // HEAD_DIM) * cache_stride + at * HEAD_DIM + j % HEAD_DIM
        tl.store(k_ptr + offsets, out, mask=is_k)
        tl.store(v_ptr + offsets, out, mask=is_v)


@triton.jit
def _attention(qkv_ptr, k_ptr, v_ptr, valid_ptr, out_ptr, at, pid, programs, heads, cache_stride, scale,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr):
    """One query head at a time (head pid, pid + programs, ...): its scores over the columns up to `at` that
    `valid` keeps, an online softmax in fp32 and the weighted values, rounded to the activations' dtype."""
    d = tl.arange(0, BLOCK_D)
    in_d = d < HEAD_DIM
    for head in range(pid, heads, programs):
        q = tl.load(qkv_ptr + head * HEAD_DIM + d, mask=in_d, other=0.0, cache_modifier=".cg").to(tl.float32)
        base = head * cache_stride
        m = tl.full((), float("-inf"), tl.float32)
        total = tl.zeros((), tl.float32)
        acc = tl.zeros((BLOCK_D,), tl.float32)
        for c0 in range(0, at + 1, BLOCK_L):
            c = c0 + tl.arange(0, BLOCK_L)
            keep = c <= at
            keep &= tl.load(valid_ptr + c, mask=keep, other=0) != 0
            kv_mask = keep[:, None] & in_d[None, :]
            keys = tl.load(k_ptr + base + c[:, None] * HEAD_DIM + d[None, :], mask=kv_mask, other=0.0,
                           cache_modifier=".cg")
            values = tl.load(v_ptr + base + c[:, None] * HEAD_DIM + d[None, :], mask=kv_mask, other=0.0,
                             cache_modifier=".cg")
            s = tl.sum(q[None, :] * keys.to(tl.float32), axis=1) * scale
            s = tl.where(keep, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=0))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe)
            correction = tl.exp(m - m_safe)
            acc = acc * correction + tl.sum(p[:, None] * values.to(tl.float32), axis=0)
            total = total * correction + tl.sum(p, axis=0)
            m = m_new
        tl.store(out_ptr + head * HEAD_DIM + d, (acc / total).to(out_ptr.dtype.element_ty), mask=in_d)


@triton.jit
def _layers_kernel(x_ptr, qkv_ptr, a_ptr, h_ptr, ln1_g, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_g, ln2_b,
                   fc_w, fc_b, out_w, out_b, cache_ptr, write_ptr, valid_ptr, counter_ptr, layers, E, heads,
                   length, eps, scale, HEAD_DIM: tl.constexpr, ACT: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, BLOCK_N4: tl.constexpr, BLOCK_K4: tl.constexpr, BLOCK_E: tl.constexpr,
                   BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr, AHEAD: tl.constexpr, EARLY: tl.constexpr,
                   POLL_LOADS: tl.constexpr):
    """Every layer (the module docstring's phases); BLOCK_N x BLOCK_K tiles for the products of E inputs,
    BLOCK_N4 x BLOCK_K4 for the MLP's second (4E inputs). Offsets that scale with the layer are 64-bit."""
    pid, programs = tl.program_id(0), tl.num_programs(0)
    at = tl.load(write_ptr)
    cache_stride = length * HEAD_DIM  # a head's columns
    wide = tl.full((), 0, tl.int64)  # added to make an offset 64-bit
    kv_size = heads * cache_stride + wide  # one layer's K (or V) buffer
    arrivals = pid * 0  # the barriers' count so far: a phase waits for every program's arrival from the one before
    for i in range(layers):
        layer = i + wide
        keys = cache_ptr + 2 * layer * kv_size
        values = keys + kv_size
        square = layer * E * E  # a layer's offset in the [L, E, E]-sized stacks (c_attn: 3 of them, MLP: 4)
        _product(x_ptr, attn_w + 3 * square, attn_b + layer * 3 * E, qkv_ptr, x_ptr, ln1_g + layer * E,
                 ln1_b + layer * E, keys, values, at, pid, programs, 3 * E, E, E, eps, counter_ptr, arrivals,
                 HEAD_DIM, cache_stride, True, 0, False, True, BLOCK_N, BLOCK_K, BLOCK_E, AHEAD, EARLY,
                 POLL_LOADS)
        _arrive(counter_ptr)
        arrivals += programs
        _wait(counter_ptr, arrivals, POLL_LOADS)
        _attention(qkv_ptr, keys, values, valid_ptr, a_ptr, at, pid, programs, heads, cache_stride, scale,
                   HEAD_DIM, BLOCK_D, BLOCK_L)
        _arrive(counter_ptr)
        arrivals += programs
        _product(a_ptr, proj_w + square, proj_b + layer * E, x_ptr, x_ptr, ln1_g, ln1_b, keys, values, at, pid,
                 programs, E, E, E, eps, counter_ptr, arrivals, HEAD_DIM, cache_stride, False, 0, True, False,
                 BLOCK_N, BLOCK_K, BLOCK_E, AHEAD, EARLY, POLL_LOADS)
        _arrive(counter_ptr)
        arrivals += programs
        _product(x_ptr, fc_w + 4 * square, fc_b + layer * 4 * E, h_ptr, x_ptr, ln2_g + layer * E,
                 ln2_b + layer * E, keys, values, at, pid, programs, 4 * E, E, E, eps, counter_ptr, arrivals,
                 HEAD_DIM, cache_stride, True, 0, False, False, BLOCK_N, BLOCK_K, BLOCK_E, AHEAD, EARLY,
                 POLL_LOADS)
        _arrive(counter_ptr)
        arrivals += programs
        _product(h_ptr, out_w + 4 * square, out_b + layer * E, x_ptr, x_ptr, ln1_g, ln1_b, keys, values, at, pid,
                 programs, E, 4 * E, E, eps, counter_ptr, arrivals, HEAD_DIM, cache_stride, False, ACT, True,
                 False, BLOCK_N4, BLOCK_K4, BLOCK_E, AHEAD, EARLY, POLL_LOADS)
        _arrive(counter_ptr)
        arrivals += programs


@functools.cache
def _sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device `index` (asked once, not a step)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def programs_for(device: torch.device) -> int:
    """How many programs the kernel runs: one a streaming multiprocessor on CUDA (each can always be resident, so
    the barriers never wait on a program that cannot start), one under Triton's interpreter."""
    if device.type != "cuda":
        return 1
    return _sm_count(torch.cuda.current_device() if device.index is None else device.index)


def tile_shape(features: int, tiling: dict) -> tuple[int, int]:
    """(rows, features) of a product's weight tile for `features` inputs: the features rounded up to a power of
    two, at most `block_k`; as many rows as make `tile` elements."""
    block_k = min(triton.next_power_of_2(features), tiling["block_k"])
    return max(1, tiling["tile"] // block_k), block_k


def scratch(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`run_layers`'s buffers between phases for a model of x's width: q/k/v [3E], the attention [E], fc [4E]."""
    embed = x.shape[-1]
    return x.new_empty(3 * embed), x.new_empty(embed), x.new_empty(4 * embed)


def run_layers(x: torch.Tensor, stacks: tuple, cache: torch.Tensor, write: torch.Tensor, valid: torch.Tensor,
               counter: torch.Tensor, buffers: tuple, *, heads: int, eps: float, scale: float,
               gelu: str) -> torch.Tensor:
    """Every layer of a GPT-2 for one row: x [1, E] -> [1, E]. `stacks`: the layers' weights stacked along a first
    dimension of layers, in `FusedGPT2Step`'s order (layer norm 1's gain and bias [L, E], c_attn [L, 3E, E] and its
    bias, c_proj [L, E, E] and its bias, layer norm 2, c_fc [L, 4E, E] and its bias, mlp's c_proj [L, E, 4E] and its
    bias; [out, in], contiguous); `cache` [2L, 1, heads, length, head size] (K0, V0, K1, ...), written at
    `write` [1]; `valid` [1, length] the columns the row attends to; `counter` [2] int32: the barriers' arrivals
    (zeroed here) and the barriers that gave up waiting, summed over every launch (`_wait`; 0 unless broken);
    `buffers`: `scratch`'s, made once by the caller."""
    layers, embed = stacks[2].shape[0], x.shape[-1]
    head_dim, length = embed // heads, cache.shape[-2]
    out = x.reshape(embed).clone()
    qkv, attended, hidden = buffers
    counter[:1].zero_()
    tiling = TILING if x.is_cuda else INTERPRETED
    (block_n, block_k), (block_n4, block_k4) = tile_shape(embed, tiling), tile_shape(4 * embed, tiling)
    _layers_kernel[(programs_for(x.device),)](
        out, qkv, attended, hidden, *stacks, cache, write, valid.reshape(-1), counter, layers, embed, heads,
        length, float(eps), float(scale), HEAD_DIM=head_dim, ACT=GELU_CODES[gelu], BLOCK_N=block_n,
        BLOCK_K=block_k, BLOCK_N4=block_n4, BLOCK_K4=block_k4, BLOCK_E=triton.next_power_of_2(embed),
        BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_L=tiling["block_l"], AHEAD=bool(tiling["ahead"]),
        EARLY=bool(tiling["early"]), POLL_LOADS=tiling["poll"] == "loads",
        num_warps=tiling["warps"])
    return out.reshape(1, embed)
