#!/usr/bin/env python3
"""Compile the one-token step's Triton kernels (NNDF/backends/decode_kernels.py) for a GPU without one: every
launch a GPT-2 shape's fused step makes (fp16, 1 and 8 rows, 384 cache columns), lowered to PTX and assembled by
the ptxas that the triton wheel carries, with each kernel's registers, spills, shared memory and vector loads.

    .venv/bin/pip install --no-deps --target /tmp/tritonpkg triton==3.6.0
    PYTHONPATH=/tmp/tritonpkg .venv/bin/python tools/compile_decode_kernels.py [--arch 90] [--shapes gpt2 gpt2-xl]

A check that the kernels build for the architecture and how the compiler laid them out; it measures nothing.
Pointers are declared 16-byte aligned, as Triton specialises them at run time for torch's allocations.
Uses `triton.compiler.ASTSource` with constexprs by name (Triton 3.6's interface).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

LINEAR_ARGS = ["x_ptr", "w_ptr", "b_ptr", "g_ptr", "beta_ptr", "res_ptr", "out_ptr"]
ATTENTION_ARGS = ["qkv_ptr", "k_ptr", "v_ptr", "write_ptr", "mask_ptr", "out_ptr"]


def products(sizes: dict, vocab: int = 50257) -> list[tuple[str, int, int, dict]]:
    """(name, N, K, epilogue) of one layer's products and the head, as GPT2/fused_decode.py launches them."""
    e = sizes["n_embd"]
    return [("qkv", 3 * e, e, dict(norm=True, bias=True, gelu=None, residual=False)),
            ("proj", e, e, dict(norm=False, bias=True, gelu=None, residual=True)),
            ("fc", 4 * e, e, dict(norm=True, bias=True, gelu="tanh", residual=False)),
            ("proj2", e, 4 * e, dict(norm=False, bias=True, gelu=None, residual=True)),
            ("head", vocab, e, dict(norm=True, bias=False, gelu=None, residual=False))]


def compile_kernel(fn, pointers: dict, scalars: dict, constants: dict, warps: int, arch: int):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {**pointers, **scalars, **{name: "constexpr" for name in constants}}
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(len(pointers))}
    source = ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=aligned)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=dict(num_warps=warps))


def describe(kernel, arch: int) -> str:
    """ptxas's registers and spills, shared memory, and the PTX's 16-byte loads."""
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as folder:
        ptx = Path(folder) / "kernel.ptx"
        ptx.write_text(kernel.asm["ptx"])
        out = subprocess.run([str(ptxas), f"-arch=sm_{arch}a", "-v", str(ptx), "-o", str(Path(folder) / "k.o")],
                             capture_output=True, text=True, check=True).stderr
    registers = re.search(r"Used (\d+) registers", out).group(1)
    spills = re.search(r"(\d+) bytes spill stores", out).group(1)
    return (f"{registers} registers, {spills} B spilled, {kernel.metadata.shared} B shared, "
            f"{kernel.asm['ptx'].count('ld.global.v4')} 16-byte loads")


def main(argv=None) -> int:
    import importlib.util

    from make_shapes_model import SHAPES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100 / H200)")
    parser.add_argument("--shapes", nargs="+", default=["gpt2", "gpt2-xl"], choices=list(SHAPES))
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 8])
    args = parser.parse_args(argv)
    if importlib.util.find_spec("triton") is None:
        parser.error("the triton package is not importable: install it into a separate folder (see this "
                     "script's docstring) and put that folder on PYTHONPATH")
    from NNDF.backends import decode_kernels as k

    for shape in args.shapes:
        sizes = SHAPES[shape]
        for rows in args.rows:
            for name, n, kk, epilogue in products(sizes):
                grid, warps, constants = k.linear_launch(rows, n, kk, False, **epilogue)
                kernel = compile_kernel(k._linear_rows_kernel, {p: "*fp16" for p in LINEAR_ARGS},
                                        dict(R="i32", eps="fp32"), constants, warps, args.arch)
                print(f"{shape} rows={rows} {name} [{n}x{kk}] grid={grid} warps={warps} "
                      f"block={constants['BLOCK_N']}x{constants['BLOCK_K']}: {describe(kernel, args.arch)}")
            heads = sizes["n_head"]
            grid, warps, constants = k.attention_launch(rows, heads, 384, sizes["n_embd"] // heads)
            pointers = {p: "*fp16" for p in ATTENTION_ARGS} | dict(write_ptr="*i64", mask_ptr="*i64")
            kernel = compile_kernel(k._decode_attention_kernel, pointers, dict(scale="fp32"), constants, warps,
                                    args.arch)
            print(f"{shape} rows={rows} attention grid={grid} warps={warps}: {describe(kernel, args.arch)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
