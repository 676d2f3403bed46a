"""Triton kernels for a decoder's one-token step on CUDA: few rows, memory-bound, one kernel per weight product.

`linear_rows(x, W, b, norm=..., gelu=..., residual=...)` is y = act(LN(x) @ W.T + b) (+ residual) for x [R, K]
(R small) and a row-major weight [N, K]: each program owns BLOCK_N output columns for all R rows, recomputes the
rows' layer-norm statistics itself (x is at most a few thousand values per row, read from cache: no separate
statistics kernel), then streams its W tile along K once (coalesced along K) and reuses it for every row. One row
accumulates W tile x row elementwise and reduces once after the loop; more rows go through `tl.dot` in 16-row
chunks. Accumulation is fp32; the normalised x is rounded to the weight's dtype first (as the unfused model does:
its layer norm outputs that dtype).

`decode_attention(qkv, keys, values, write, mask, heads=, scale=)` is one query per row and head (grid (R, H)) over
static K/V buffers [R, H, L, D]: q, k, v are read from the packed product qkv [R, 3E]; k and v are stored at
column `write` (a device tensor, so a CUDA graph replays it); the program attends over the columns < write that
`mask` [R, L] keeps plus the new column from its registers (never re-read after the store), online softmax in
fp32. Output [R, E].

Only long-stable `tl` APIs (masked loads/stores, reductions, `tl.dot`), so the kernels build with the Triton of
any recent torch; with TRITON_INTERPRET=1 they run on CPU tensors (how the tests check them without a GPU: shapes
are constexprs and loop bounds constants, which the interpreter needs).
Launch configurations come from a small static table (`linear_config`), not autotuning: deterministic, and
nothing is benchmarked while a CUDA graph warms up.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

GELUS = ("tanh", "none")  # F.gelu's `approximate` values the epilogue implements
DOT_ROWS = 16  # rows of one program on the tl.dot path (more rows: more programs)
TILE_VALUES = 8192  # weight values one program loads per loop iteration (one-row path; the tl.dot path's cap)
STATS_VALUES = 8192  # values of x one program loads at once for the layer norm's statistics
# cache columns per attention loop iteration: one program per row and head, so few programs; wide blocks keep
# 32 KB of K and of V (fp16, head size 64) in flight per iteration (a 384-column cache: 2 iterations)
ATTENTION_COLUMNS = 256


@triton.jit
def _gelu(y, KIND: tl.constexpr):
    """GELU in fp32: KIND 1 = tanh approximation, 2 = exact (erf)."""
    if KIND == 1:
        u = tl.minimum(0.7978845608028654 * (y + 0.044715 * y * y * y), 15.0)  # tanh(15) is 1 in fp32
        y = 0.5 * y * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))  # 1 + tanh(u), finite for any u
    else:
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    return y


@triton.jit
def _row_stats(x_ptr, R, eps, K: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Mean and 1/std of each of the R rows of x [R, K]: from one load when BLOCK covers K (the usual case: one
    round trip to cache), else two passes over x (exact for large-mean rows)."""
    rows = tl.arange(0, ROWS)
    if BLOCK >= K:
        cols = tl.arange(0, BLOCK)
        keep = (rows[:, None] < R) & (cols[None, :] < K)
        x = tl.load(x_ptr + rows[:, None] * K + cols[None, :], mask=keep, other=0.0).to(tl.float32)
        mean = tl.sum(x, 1) / K
        d = tl.where(keep, x - mean[:, None], 0.0)
        squares = tl.sum(d * d, 1)
    else:
        total = tl.zeros([ROWS], dtype=tl.float32)
        for k0 in range(0, K, BLOCK):
            cols = k0 + tl.arange(0, BLOCK)
            keep = (rows[:, None] < R) & (cols[None, :] < K)
            x = tl.load(x_ptr + rows[:, None] * K + cols[None, :], mask=keep, other=0.0).to(tl.float32)
            total += tl.sum(x, 1)
        mean = total / K
        squares = tl.zeros([ROWS], dtype=tl.float32)
        for k0 in range(0, K, BLOCK):
            cols = k0 + tl.arange(0, BLOCK)
            keep = (rows[:, None] < R) & (cols[None, :] < K)
            x = tl.load(x_ptr + rows[:, None] * K + cols[None, :], mask=keep, other=0.0).to(tl.float32)
            d = tl.where(keep, x - mean[:, None], 0.0)
            squares += tl.sum(d * d, 1)
    return mean, 1.0 / tl.sqrt(squares / K + eps)


@triton.jit
def _normalised(x, keep, mean, rstd, g_ptr, beta_ptr, ks, K: tl.constexpr, dtype: tl.constexpr):
    """(x - mean) * rstd * gain + shift over the columns ks, rounded to `dtype` (the norm's output dtype, as the
    unfused model rounds it) and back to fp32; 0 where not `keep`."""
    g = tl.load(g_ptr + ks, mask=ks < K, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + ks, mask=ks < K, other=0.0).to(tl.float32)
    return tl.where(keep, (x.to(tl.float32) - mean) * rstd * g + beta, 0.0).to(dtype).to(tl.float32)


@triton.jit
def _linear_rows_kernel(x_ptr, w_ptr, b_ptr, g_ptr, beta_ptr, res_ptr, out_ptr, R, eps, N: tl.constexpr,
                        K: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        NORM: tl.constexpr, BIAS: tl.constexpr, GELU: tl.constexpr, RESIDUAL: tl.constexpr,
                        DOT: tl.constexpr, PRECISION: tl.constexpr, STATS_BLOCK: tl.constexpr):
    """out[:, n-block] = act(LN(x) @ W[n-block].T + b) (+ residual); x [R, K], W [N, K], out [R, N]. DOT: ROWS
    rows through tl.dot; else one row, whose products accumulate elementwise in a [BLOCK_N, BLOCK_K] tile reduced
    once after the loop (no cross-thread reduction, so no barrier, inside the loop)."""
    chunk = tl.program_id(1) * ROWS  # rows beyond ROWS: one program column per ROWS-row chunk
    x_ptr += chunk * K
    res_ptr += chunk * N
    out_ptr += chunk * N
    R = R - chunk
    rows = tl.arange(0, ROWS)
    ns = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    if NORM:
        mean, rstd = _row_stats(x_ptr, R, eps, K, ROWS, STATS_BLOCK)
    acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    part = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + ns[:, None] * K + ks[None, :], mask=(ns[:, None] < N) & (ks[None, :] < K), other=0.0)
        if DOT:
            keep = (rows[:, None] < R) & (ks[None, :] < K)
            x = tl.load(x_ptr + rows[:, None] * K + ks[None, :], mask=keep, other=0.0)
            if NORM:
                x = _normalised(x, keep, mean[:, None], rstd[:, None], g_ptr, beta_ptr, ks[None, :], K, w.dtype)
            acc += tl.dot(x.to(w.dtype), tl.trans(w), input_precision=PRECISION)
        else:
            row = tl.load(x_ptr + ks, mask=ks < K, other=0.0).to(tl.float32)  # [BLOCK_K]
            if NORM:
                row = _normalised(row, ks < K, tl.sum(mean, 0), tl.sum(rstd, 0), g_ptr, beta_ptr, ks, K, w.dtype)
            part += w.to(tl.float32) * row[None, :]
    if not DOT:
        acc += tl.sum(part, 1)[None, :]
    if BIAS:
        acc += tl.load(b_ptr + ns, mask=ns < N, other=0.0).to(tl.float32)[None, :]
    if GELU != 0:
        acc = _gelu(acc, GELU)
    where = rows[:, None] * N + ns[None, :]
    keep = (rows[:, None] < R) & (ns[None, :] < N)
    if RESIDUAL:
        acc += tl.load(res_ptr + where, mask=keep, other=0.0).to(tl.float32)
    tl.store(out_ptr + where, acc.to(out_ptr.dtype.element_ty), mask=keep)


def linear_config(rows: int, n: int, k: int) -> tuple[int, int, int, bool]:
    """(BLOCK_N, BLOCK_K, num_warps, dot) for a product of `rows` rows with a weight [n, k]. One row: the widest
    column block that still gives >= 512 programs (~4 per SM of a 132-SM GPU; down to 2 columns for narrow
    outputs) and a K chunk making an 8192-value tile (16 KB of fp16 loads in flight per program and iteration:
    the loop is not software-pipelined, so the tile is what hides memory latency), 4 warps (64 values a thread).
    More rows: tl.dot on 16-row chunks (its loop is software-pipelined), tiles of up to 8192 values."""
    if rows == 1:
        block_n = next((b for b in (64, 32, 16, 8, 4) if triton.cdiv(n, b) >= 512), 2)
        return block_n, max(128, min(TILE_VALUES // block_n, triton.next_power_of_2(k))), 4, False
    block_n = next((b for b in (64, 32) if triton.cdiv(n, b) >= 264), 16)  # >= 2 programs per SM if it can
    return block_n, max(64, min(256, TILE_VALUES // block_n)), 4, True


def _check(x, weight, extra: dict) -> None:
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"linear_rows: x {tuple(x.shape)} and weight {tuple(weight.shape)} are not [R, K], [N, K]")
    for name, t in dict(x=x, weight=weight, **extra).items():
        if t is not None and not t.is_contiguous():
            raise ValueError(f"linear_rows: {name} must be contiguous")


def linear_launch(rows: int, n: int, k: int, fp32: bool, *, norm: bool, bias: bool, gelu: str | None,
                  residual: bool) -> tuple[tuple[int, int], int, dict]:
    """(grid, num_warps, constexpr arguments) of `_linear_rows_kernel` for this product (also what
    tools/compile_decode_kernels.py compiles ahead of time)."""
    block_n, block_k, warps, dot = linear_config(rows, n, k)
    chunk = DOT_ROWS if dot else 1
    constants = dict(N=n, K=k, ROWS=chunk, BLOCK_N=block_n, BLOCK_K=block_k, NORM=norm, BIAS=bias,
                     GELU=0 if gelu is None else 1 + GELUS.index(gelu), RESIDUAL=residual, DOT=dot,
                     PRECISION="ieee" if fp32 else "tf32", STATS_BLOCK=min(triton.next_power_of_2(k),
                                                                           STATS_VALUES // chunk))
    return (triton.cdiv(n, block_n), triton.cdiv(rows, chunk)), warps, constants


def linear_rows(x, weight, bias=None, *, norm: tuple | None = None, gelu: str | None = None, residual=None):
    """act(LN(x) @ weight.T + bias) (+ residual): x [R, K], weight [N, K] -> [R, N] in x's dtype. `norm` is the
    layer norm's (gain, shift, eps) or None; `gelu` one of GELUS or None; `residual` [R, N] or None."""
    if gelu is not None and gelu not in GELUS:
        raise ValueError(f"linear_rows: gelu {gelu!r}: one of {', '.join(GELUS)} or None")
    _check(x, weight, dict(residual=residual))
    (rows, k), n = x.shape, weight.shape[0]
    out = torch.empty(rows, n, dtype=x.dtype, device=x.device)
    grid, warps, constants = linear_launch(rows, n, k, x.dtype == torch.float32, norm=norm is not None,
                                           bias=bias is not None, gelu=gelu, residual=residual is not None)
    gain, shift, eps = norm if norm is not None else (x, x, 0.0)
    _linear_rows_kernel[grid](x, weight, bias if bias is not None else x, gain, shift,
                              residual if residual is not None else x, out, rows, float(eps), **constants,
                              num_warps=warps)
    return out


@triton.jit
def _decode_attention_kernel(qkv_ptr, k_ptr, v_ptr, write_ptr, mask_ptr, out_ptr, scale, H: tl.constexpr,
                             L: tl.constexpr, E: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
                             BLOCK_L: tl.constexpr):
    """Program (row r, head h): store k/v at column `write`, attend q over columns < write kept by the mask and
    the new column. qkv [R, 3E], buffers [R, H, L, D] contiguous, mask [R, L], out [R, E]."""
    r, h = tl.program_id(0), tl.program_id(1)
    ds = tl.arange(0, BLOCK_D)
    dk = ds < D
    base = qkv_ptr + r * 3 * E + h * D + ds
    q = tl.load(base, mask=dk, other=0.0).to(tl.float32)
    k_new = tl.load(base + E, mask=dk, other=0.0)
    v_new = tl.load(base + 2 * E, mask=dk, other=0.0)
    write = tl.load(write_ptr).to(tl.int32)
    head = (r * H + h) * L * D
    tl.store(k_ptr + head + write * D + ds, k_new.to(k_ptr.dtype.element_ty), mask=dk)
    tl.store(v_ptr + head + write * D + ds, v_new.to(v_ptr.dtype.element_ty), mask=dk)
    # the new column first: it is kept when its mask is (always, for a real token)
    s_new = tl.sum(q * k_new.to(tl.float32), 0) * scale
    m = tl.where(tl.load(mask_ptr + r * L + write) != 0, s_new, float("-inf"))
    total = tl.where(m == float("-inf"), 0.0, 1.0)
    acc = v_new.to(tl.float32) * total
    for l0 in range(0, L, BLOCK_L):  # a constant trip count (the interpreter needs one); blocks past write skip
        if l0 < write:
            ls = l0 + tl.arange(0, BLOCK_L)
            keep = (ls < write) & (tl.load(mask_ptr + r * L + ls, mask=ls < write, other=0) != 0)
            tile = head + ls[:, None] * D + ds[None, :]
            both = keep[:, None] & dk[None, :]
            keys = tl.load(k_ptr + tile, mask=both, other=0.0).to(tl.float32)
            vals = tl.load(v_ptr + tile, mask=both, other=0.0)  # issued with K's: both in flight at once
            s = tl.where(keep, tl.sum(keys * q[None, :], 1) * scale, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 0))
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf) while nothing is kept yet
            p = tl.exp(s - shift)
            alpha = tl.exp(m - shift)
            acc = acc * alpha + tl.sum(p[:, None] * vals.to(tl.float32), 0)
            total = total * alpha + tl.sum(p, 0)
            m = m_new
    tl.store(out_ptr + r * E + h * D + ds, (acc / total).to(out_ptr.dtype.element_ty), mask=dk)


def decode_attention(qkv, keys, values, write, mask, *, heads: int, scale: float):
    """One-query attention with the cache write: qkv [R, 3E] (q | k | v), keys/values [R, H, L, D] (updated at
    column write[0]), write a device integer tensor [1], mask [R, L] (nonzero = attend) -> [R, E] in qkv's dtype."""
    rows, width = qkv.shape
    embed = width // 3
    if keys.shape != values.shape or tuple(keys.shape[:2]) != (rows, heads) or keys.shape[3] * heads != embed:
        raise ValueError(f"decode_attention: buffers {tuple(keys.shape)} do not hold {heads} heads of qkv "
                         f"{tuple(qkv.shape)}")
    if not (qkv.is_contiguous() and keys.is_contiguous() and values.is_contiguous() and mask.is_contiguous()):
        raise ValueError("decode_attention: qkv, keys, values and mask must be contiguous")
    out = torch.empty(rows, embed, dtype=qkv.dtype, device=qkv.device)
    grid, warps, constants = attention_launch(rows, heads, keys.shape[2], keys.shape[3])
    _decode_attention_kernel[grid](qkv, keys, values, write, mask, out, float(scale), **constants, num_warps=warps)
    return out


def attention_launch(rows: int, heads: int, length: int, dim: int) -> tuple[tuple[int, int], int, dict]:
    """(grid, num_warps, constexpr arguments) of `_decode_attention_kernel` for buffers [rows, heads, length, dim]."""
    block_l = min(ATTENTION_COLUMNS, max(16, triton.next_power_of_2(length)))
    constants = dict(H=heads, L=length, E=heads * dim, D=dim, BLOCK_D=triton.next_power_of_2(dim), BLOCK_L=block_l)
    return (rows, heads), 8, constants
