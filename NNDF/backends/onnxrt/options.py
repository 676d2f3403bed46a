"""ONNX Runtime's own flags: the onnxrt backend owns them (`NNDF.registry.BACKENDS` lists `ORTOptions`, what the
library functions take; the CLI accepts a flag only when onnxrt is in the run). `--ort-optimize` and
`--quant-attention` are read only by the kinds that add `HeadOptions` (encoder models).

`--quantize` takes one or more of none / int8 / int4: each becomes its own row of the action's table (`onnxrt`,
`onnxrt-int8`, `onnxrt-int4`), so one command shows what each quantization costs beside the float graph. The
other backends never read it (the CLI refuses it without onnxrt; trt builds from the float export). int8 is dynamic
per channel unless `--quant-int8-blocks` makes it weight blocks (row `onnxrt-int8-bN`).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from NNDF.errors import UsageError
from NNDF.options import CacheOptions, HeadOptions, OptionGroup, flag

QUANTIZE_CHOICES = ("none", "int8", "int4")
PRODUCTS = ("linear", "matmul")  # what the graphs built from the weights state their products with
CUDA_PRODUCTS = "linear"  # their default on CUDA (docs/PERFORMANCE.md); on the CPU ONNX Runtime's MatMul
BLOCK_SIZES = (16, 32, 64, 128, 256)  # MatMulNBits block sizes ONNX Runtime's kernels take


@dataclass(frozen=True)
class QuantizeOptions(OptionGroup):
    title = "ONNX Runtime: quantized graphs (onnxrt backend)"
    owner = "the onnxrt backend"
    backends = ("onnxrt",)
    quantize: tuple = flag(("none",), "--quantize", nargs="+", type=str, choices=QUANTIZE_CHOICES, metavar="{none,int8,int4}", help="weights of the onnxrt graphs: none (float), int8 (dynamic int8 MatMul, fp32 graphs), int4 (MatMulNBits blocks); several values give one row each (e.g. --quantize none int8 int4: onnxrt, onnxrt-int8, onnxrt-int4)")
    quant_block_size: int | None = flag(None, "--quant-block-size", type=int, choices=BLOCK_SIZES, help="int4: weights per scale along the input dimension (default 128: measured, docs/PERFORMANCE.md)")
    quant_symmetric: bool | None = flag(None, "--quant-symmetric", action=argparse.BooleanOptionalAction, help="int4: symmetric blocks (one scale each) or, the default, --no-quant-symmetric (a scale and a zero point each: measured more accurate)")
    quant_int8_blocks: int | None = flag(None, "--quant-int8-blocks", type=int, choices=BLOCK_SIZES, help="int8: 8-bit weight blocks of this many along the input dimension, one scale each (ONNX Runtime's MatMulNBits with 8 bits; activations quantized per block at run time), instead of the default dynamic int8 per output channel; the row is onnxrt-int8-bN. Faster one-token steps where a model is so small that its step is overhead, slower prompt passes, slower steps on larger models (2-core CPU: llama-offline 2.0x the fp32 tokens/s against 1.7x with blocks of 64; GPT-2 124M shapes slower: docs/QUANTIZATION.md)")

    def check(self):
        repeated = sorted({q for q in self.quantize if self.quantize.count(q) > 1})
        if repeated:
            raise UsageError(f"--quantize names {', '.join(repeated)} twice; give each of "
                             f"{', '.join(QUANTIZE_CHOICES)} at most once")
        for name, value in (("--quant-block-size", self.quant_block_size), ("--quant-symmetric", self.quant_symmetric)):
            if value is not None and "int4" not in self.quantize:
                raise UsageError(f"{name} applies to --quantize int4 (int4's blocks), which this run does not use")
        if self.quant_int8_blocks is not None and "int8" not in self.quantize:
            raise UsageError("--quant-int8-blocks applies to --quantize int8 (int8 in weight blocks), which this run "
                             "does not use")


@dataclass(frozen=True)
class OrtOptimizeOptions(OptionGroup):
    title = "ONNX Runtime: graph optimizer (onnxrt backend, encoder models)"
    owner = "encoder models on the onnxrt backend"
    backends = ("onnxrt",)
    kind_scope = HeadOptions
    ort_optimize: bool = flag(True, "--ort-optimize", action=argparse.BooleanOptionalAction, help="run ONNX Runtime's transformer graph optimizer on the export (fused attention, skip layer norm, GELU); --no-ort-optimize keeps the plain export, to compare")
    quant_attention: bool = flag(False, "--quant-attention", action=argparse.BooleanOptionalAction, help="int8: also quantize the packed q/k/v weights of the optimized graph's fused Attention (ONNX Runtime's QAttention): faster on long inputs, less exact (all-MiniLM-L6-v2 on a 2-core CPU: 8 x 128 in 28.5 against 39.8 ms, least embedding cosine to fp32 0.9895 against 0.9918 on data/encoder_offline.jsonl; docs/QUANTIZATION.md); default: left float")


@dataclass(frozen=True)
class BuiltGraphOptions(OptionGroup):
    title = "ONNX Runtime: graphs built from the weights (onnxrt backend, generative models)"
    owner = "generative models on the onnxrt backend"
    backends = ("onnxrt",)
    kind_scope = CacheOptions  # the graphs built from the weights are static-cache decoders
    ort_products: str | None = flag(None, "--ort-products", choices=PRODUCTS, help="the products of the graphs onnxrt builds from the weights (--static-cache): linear (this project's Linear op, NNDF/backends/onnxrt/custom_ops.py: on CUDA its kernel reads a one-token step's weights, compiled by nvcc with the graph; a family's graphs also attend with this project's Attention op where its builder declares it) or matmul (ONNX Runtime's MatMul: cuBLAS on CUDA, MLAS on the CPU). Default: linear on CUDA, matmul on the CPU; refused where the run takes no built graph")

    def products(self, device: str) -> str:
        """What this run's built graphs use on `device` (a torch device type)."""
        return self.ort_products or (CUDA_PRODUCTS if device == "cuda" else "matmul")


@dataclass(frozen=True)
class ORTOptions(QuantizeOptions, OrtOptimizeOptions, BuiltGraphOptions):
    """What the onnxrt backend reads (`run.options_of(ORTOptions)`)."""

    def check(self):
        if self.quant_attention and "int8" not in self.quantize:
            raise UsageError("--quant-attention applies to --quantize int8 (int8's QAttention), which this run does "
                             "not use")
        if self.quant_attention and self.quant_int8_blocks is not None:
            raise UsageError("--quant-attention quantizes the fused Attention to dynamic int8 (QAttention) and "
                             "--quant-int8-blocks makes int8 weight blocks instead: give one of them")
        if self.quant_attention and not self.ort_optimize:
            raise UsageError("--quant-attention quantizes the fused Attention of ONNX Runtime's optimized graph, "
                             "which --no-ort-optimize leaves out: drop one of them")

    def quantizations(self) -> tuple:
        """One entry per row, in the order given: None for the float graph, else a `Quantization`."""
        from NNDF.backends.onnxrt.quantize import QUANTIZATIONS

        return tuple(None if q == "none" else QUANTIZATIONS[q].from_options(self)
                     for q in self.quantize)

