"""Our Triton kernels (`NNDF.backends.torch.kernels`) against what a fused step would run otherwise, one product or
one attention at a time, on one CUDA card:

    python tools/bench/kernel_bench.py OUT [--shapes qwen2.5-0.5b,mistral-7b] [--quick]

- GEMV: each product of a step of --rows rows at the model's shapes (q/k/v, o_proj, gate/up, down, the LM head)
  through cuBLAS (`F.linear`), inductor's reduction form (`CausalLM.fused_step.product` form 1, compiled), our
  kernel alone (its partial sums, which a step's next inductor kernel sums) at every tiling of a grid (block_n x
  block_k x programs x warps; with --dot also the dot form's grid), and our kernel as `gemv` picks its form and
  tiling, compiled with the sum and the cast (two kernels); GB/s = weight bytes / time.
- attention: one query per head over a 256-column static cache (write position 200; Mistral: a 64-column
  window), the fused step's plain-op form (compiled), SDPA, and our kernel at several column blocks and warps;
  then over a `--long` buffer (4096 columns, 96 before its end), where one program per row and head walks far
  (`kernels.attention_columns`: the steps leave such buffers to inductor's form).

Every time is the median over 20 CUDA-graph replays of a graph that runs the operation once per copy of its inputs
(copies enough to exceed 4x the card's L2, so weights come from memory, as in a step), divided by the copies.
Writes OUT/kernel_bench.json and a markdown table to stdout.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from CausalLM.fused_step import product  # noqa: E402
from CausalLM.fused_step import attend_one, attend_sdpa  # noqa: E402
from NNDF.backends.torch import kernels  # noqa: E402

L2_BYTES = 50 * 2**20  # H100 / H200
# (name, out_features, in_features) of the products of a batch-1 step; attention (heads, kv heads, head_dim, window)
SHAPES = {
    "qwen2.5-0.5b": {"products": [("qkv", 1152, 896), ("o_proj", 896, 896), ("gate_up", 9728, 896),
                                  ("down", 896, 4864), ("lm_head", 151936, 896)],
                     "attention": (14, 2, 64, None)},
    "mistral-7b": {"products": [("qkv", 6144, 4096), ("o_proj", 4096, 4096), ("gate_up", 28672, 4096),
                                ("down", 4096, 14336)],
                   "attention": (32, 8, 128, 64)},
    "llama-3-8b": {"products": [("qkv", 6144, 4096), ("o_proj", 4096, 4096), ("gate_up", 28672, 4096),
                                ("down", 4096, 14336)],
                   "attention": (32, 8, 128, None)},
    # GPT-2's layer (c_attn, c_proj, c_fc, the MLP's c_proj) and its tied head
    "gpt2-xl": {"products": [("qkv", 4800, 1600), ("proj", 1600, 1600), ("fc", 6400, 1600), ("fc2", 1600, 6400),
                             ("lm_head", 50257, 1600)],
                "attention": (25, 25, 64, None)},
    # the encoder-decoders' decoder layers: self q/k/v, o, cross q, wi (wi_0 and wi_1 in flan-T5), wo / fc1, fc2
    "t5-base": {"products": [("qkv", 2304, 768), ("o", 768, 768), ("wi", 3072, 768), ("wo", 768, 3072)],
                "attention": (12, 12, 64, None)},
    "bart-large": {"products": [("qkv", 3072, 1024), ("o", 1024, 1024), ("fc1", 4096, 1024),
                                ("fc2", 1024, 4096)],
                   "attention": (16, 16, 64, None)},
}
GRID = dict(block_n=(2, 4, 8), block_k=(512, 1024), programs=(512, 1024, 2048), warps=(2, 4, 8))
QUICK = dict(block_n=(4,), block_k=(1024,), programs=(1024,), warps=(2,))  # the default tiling
# the tilings of the dot form (`kernels.dot_config`, products of 2-16 rows), timed with --dot
DOT_GRID = dict(block_n=(16, 32, 64), block_k=(128, 256, 512), programs=(1024,), warps=(4, 8))


def graph_time(fn, copies: int, replays: int = 20) -> float:
    """Seconds per call of fn(i) for i in range(copies), from CUDA-graph replays (median)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(copies):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(copies):
            fn(i)
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / copies)
    return sorted(times)[len(times) // 2]


def gemv_rows(name: str, out_features: int, in_features: int, grid: dict, rows_in: int = 1,
              dot_grid: dict | None = None) -> list[dict]:
    nbytes = out_features * in_features * 2
    copies = max(2, min(64, 4 * L2_BYTES // nbytes + 1))
    weights = [torch.randn(out_features, in_features, device="cuda", dtype=torch.float16) * 0.02
               for _ in range(copies)]
    x = torch.randn(rows_in, in_features, device="cuda", dtype=torch.float16)
    reference = F.linear(x.float(), weights[0].float())
    torch._dynamo.reset()
    reduction = torch.compile(lambda x, w: product(x, w, None, 1), dynamic=False)
    ours = torch.compile(lambda x, w: kernels.gemv(x, w), dynamic=False)
    rows = []

    def row(variant, fn, check=None, **config):  # check: fn's result as the product (fn's own by default)
        error = ((check or fn)(0).float() - reference).abs().max().item()
        seconds = graph_time(fn, copies)
        rows.append({"product": name, "rows": rows_in, "out": out_features, "in": in_features, "variant": variant,
                     **config,
                     "us": seconds * 1e6, "gb_s": nbytes / seconds / 1e9, "max_error": error})

    row("cublas", lambda i: F.linear(x, weights[i]))
    row("inductor-reduction", lambda i: reduction(x, weights[i]))
    for block_n, block_k, programs, warps in itertools.product(*grid.values()):
        config = kernels.gemv_config(rows_in, out_features, in_features, programs, block_n, block_k, warps)
        if config.block_k != block_k and block_k != min(grid["block_k"]):
            continue  # narrowed by the features or the rows: the same tiling as the grid's smallest block_k
        try:
            row("gemv kernel", lambda i, c=config: kernels.gemv_partials(x, weights[i], *c),
                lambda i, c=config: kernels.gemv_partials(x, weights[i], *c).sum(0), block_n=block_n,
                block_k=config.block_k, programs=programs, warps=warps, splits=config.splits)
        except Exception as exc:  # e.g. out of registers / shared memory at the largest tiles
            rows.append({"product": name, "variant": "gemv", "block_n": block_n, "block_k": block_k,
                         "programs": programs, "warps": warps, "error": f"{type(exc).__name__}: {str(exc)[:160]}"})
    for block_n, block_k, programs, warps in itertools.product(*(dot_grid or {}).values()):
        config = kernels.dot_config(rows_in, out_features, in_features, programs, block_n, block_k, warps)
        if config.block_k != block_k:
            continue  # narrowed by the features: another tiling's
        row("gemv dot", lambda i, c=config: kernels.gemv_partials(x, weights[i], *c),
            lambda i, c=config: kernels.gemv_partials(x, weights[i], *c).sum(0), block_n=block_n,
            block_k=config.block_k, programs=programs, warps=warps, splits=config.splits)
    dot = kernels.uses_dot(rows_in, x.dtype, weights[0].dtype)
    default = (kernels.dot_config if dot else kernels.gemv_config)(rows_in, out_features, in_features)
    row("gemv dot compiled" if dot else "gemv compiled", lambda i: ours(x, weights[i]), block_n=default.block_n,
        block_k=default.block_k, splits=default.splits, warps=default.warps)
    return rows


def attention_rows(shape: str, heads: int, kv_heads: int, dim: int, window, layers: int = 32, length: int = 256,
                   write: int = 200) -> list[dict]:
    keys = [torch.randn(1, kv_heads, length, dim, device="cuda", dtype=torch.float16) for _ in range(layers)]
    values = [torch.randn_like(k) for k in keys]
    q = torch.randn(1, heads, dim, device="cuda", dtype=torch.float16)
    columns = torch.arange(length, device="cuda")
    valid = (columns <= write)[None]
    if window:
        valid &= columns > write - window
    at = torch.tensor([write], device="cuda")
    scale = dim ** -0.5
    reference = attend_one(q.float(), keys[0].float(), values[0].float(), valid, scale)
    plain = torch.compile(lambda q, k, v: attend_one(q, k, v, valid, scale), dynamic=False)
    rows = []
    label = f"{shape} ({write + 1} of {length} columns)"

    def row(variant, fn, **config):
        error = (fn(0).float() - reference).abs().max().item()
        rows.append({"attention": label, "variant": variant, **config, "us": graph_time(fn, layers) * 1e6,
                     "max_error": error})

    torch._dynamo.reset()
    row("reduction (compiled)", lambda i: plain(q, keys[i], values[i]))
    row("sdpa", lambda i: attend_sdpa(q, keys[i], values[i], valid, scale))
    if length <= 256:  # the tiling grid, one program per row and head
        for block_l, warps in itertools.product((32, 64, 128, 256), (1, 2, 4, 8)):
            row("kernel", lambda i, b=block_l, w=warps: kernels.decode_attention(
                q, keys[i], values[i], valid, at, scale, window, b, w), block_l=block_l, warps=warps)
    row("kernel (defaults)", lambda i: kernels.decode_attention(q, keys[i], values[i], valid, at, scale, window))
    return rows


def table(rows: list[dict]) -> str:
    keys = ["product", "attention", "rows", "out", "in", "variant", "block_n", "block_k", "programs", "splits",
            "block_l", "warps", "us", "gb_s", "max_error"]
    keys = [k for k in keys if any(k in r for r in rows)]
    fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k, "")) for k in keys) + " |" for r in rows if "error" not in r]
    return "\n".join(lines)


def best(rows: list[dict]) -> list[dict]:
    """Per product: cuBLAS, inductor, our default tiling and our fastest tiling; per attention: each variant's
    fastest."""
    out, groups = [], {}
    for r in rows:
        if "error" not in r:
            groups.setdefault((r.get("product") or r.get("attention"), r["variant"]), []).append(r)
    for group in groups.values():
        out.append(min(group, key=lambda r: r["us"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--quick", action="store_true", help="the default tiling only")
    parser.add_argument("--attention-only", action="store_true", help="the attention rows only")
    parser.add_argument("--products-only", action="store_true", help="the GEMV rows only")
    parser.add_argument("--rows", type=int, default=1, help="rows of the products (beams x batch, at most 16)")
    parser.add_argument("--dot", action="store_true", help="also the dot form's tilings (DOT_GRID; 2+ rows)")
    parser.add_argument("--long", type=int, default=4096, help="the long buffer's columns for the attention rows")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import triton

    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    rows = []
    for shape in args.shapes.split(","):
        for name, out_features, in_features in [] if args.attention_only else SHAPES[shape]["products"]:
            rows += gemv_rows(f"{shape}:{name}", out_features, in_features, QUICK if args.quick else GRID, args.rows,
                              DOT_GRID if args.dot else None)
            print(table(best([r for r in rows if r.get("product") == f"{shape}:{name}"])), flush=True)
        for length, write in () if args.products_only else ((256, 200), (args.long, args.long - 96)):
            got = attention_rows(shape, *SHAPES[shape]["attention"], length=length, write=write)
            print(table(best(got)), flush=True)
            rows += got
        (args.out / "kernel_bench.json").write_text(json.dumps(rows, indent=1))
    print("\nall rows:\n" + table(rows))


if __name__ == "__main__":
    main()
