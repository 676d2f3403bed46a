#!/usr/bin/env python3
"""How fast ONNX Runtime's CUDA products read one-row steps' weights, by how the graph states them:

    python3 tools/bench/ort_matmul_layouts.py OUT [--shapes 2048x2048,2048x6144,...] [--rows 1,8] [--layers 24]

A graph per (layout, shape, rows): `--layers` products in a chain x -> W1 -> W2 -> ... (W1 [K, N], W2 [N, K], each
weight its own random fp16 tensor, so the chain reads every weight once a run and no weight stays in L2), replayed
from ONNX Runtime's CUDA graph with bound buffers. Layouts:

    matmul      MatMul(x, W) with W stored [in, out] (the built graphs' form)
    transposed  FusedMatMul(x, W, transB=1) with W stored [out, in] (the checkpoint's own layout)
    gemm        Gemm(x, W, transB=1) on a 2-D x [rows, in], W stored [out, in]
    linear      this project's Linear op (NNDF/backends/onnxrt/custom_ops.py) with W stored [out, in], its library
                compiled once into OUT/ops for the GPU's compute capability (the CPU build with --device cpu)
    linear-norm         the Linear op normalising its input first (an RMSNorm inside the product)
    linear-normkernel   ONNX Runtime's SimplifiedLayerNormalization, then the Linear op (the norm's own kernel)

Per row: wall us a replay (synchronised, median of --repeats), GPU us per product and kernels per replay (torch's
profiler: CUPTI sees ONNX Runtime's kernels), the kernels' names and the weights' GB/s. Writes OUT/layouts.json.
With --device cpu: a smoke run of the graphs on ONNX Runtime's CPU provider (fp32, no CUDA graph, no profile).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tools.bench

from NNDF.backends.onnxrt import custom_ops  # noqa: E402

LAYOUTS = ("matmul", "transposed", "gemm", "linear", "linear-norm", "linear-normkernel")


def graph(layout: str, k: int, n: int, rows: int, layers: int, dtype, folder: Path, library: Path | None) -> Path:
    """A chain of `layers` products alternating [k -> n] and [n -> k], stated as `layout`; saved in `folder`."""
    from CausalLM import fused_graph as fg

    g = fg.GraphBuilder(dtype, data=folder / f"{layout}.onnx.data")
    two_d = layout == "gemm"
    g.input("x", g.elem, [rows, k] if two_d else [1, rows, k])
    rng = np.random.default_rng(0)
    x, width = "x", k
    for i in range(layers):
        out = n if i % 2 == 0 else k
        weight = (rng.standard_normal((out, width), dtype=np.float32) * width ** -0.5).astype(dtype)  # [out, in]
        if layout == "matmul":
            x = g.op("MatMul", [x, g.weight(f"w{i}", weight.T)])
        elif layout == "transposed":
            x = g.op("FusedMatMul", [x, g.weight(f"w{i}", weight)], domain=fg.MS, transB=1, alpha=1.0)
        elif layout == "gemm":
            x = g.op("Gemm", [x, g.weight(f"w{i}", weight)], transB=1)
        elif layout == "linear-norm":
            gamma = g.weight(f"g{i}", (1 + 0.1 * rng.standard_normal(width)).astype(dtype))
            x = g.op("Linear", [x, g.weight(f"w{i}", weight), "", "", gamma], [f"y{i}", f"n{i}"],
                     domain=custom_ops.DOMAIN, norm=fg.RMS_NORM, epsilon=1e-6)[0]
        else:
            if layout == "linear-normkernel":
                gamma = g.weight(f"g{i}", (1 + 0.1 * rng.standard_normal(width)).astype(dtype))
                x = g.op("SimplifiedLayerNormalization", [x, gamma], axis=-1, epsilon=1e-6)
            x = g.op("Linear", [x, g.weight(f"w{i}", weight)], domain=custom_ops.DOMAIN)
        width = out
    g.op("Identity", [x], ["y"])
    g.output("y", g.elem, [rows, width] if two_d else [1, rows, width])
    path = folder / f"{layout}.onnx"
    model = g.model("layouts")  # with the nndf domain's opset where a node is the Linear op
    if layout.startswith("linear"):
        shutil.copy(library, folder / custom_ops.FILE)  # make_session registers the library beside a graph
    fg.save(model, path)
    return path


def measure(path: Path, rows: int, k: int, layers: int, device: str, repeats: int) -> dict:
    import torch

    from tools.bench.kernel_table import kernel_table

    if device == "cpu":
        from NNDF.backends.onnxrt.steps import make_session

        session = make_session(path, torch.device("cpu"))
        shape = session.get_inputs()[0].shape
        x = np.random.default_rng(1).standard_normal([d if isinstance(d, int) else 1 for d in shape],
                                                     dtype=np.float32)
        start = time.perf_counter()
        session.run(None, {"x": x})
        return {"wall_us": (time.perf_counter() - start) * 1e6}
    from NNDF.backends.onnxrt.steps import make_session

    stream = torch.cuda.Stream()
    session = make_session(path, torch.device("cuda", 0), stream=stream, cuda_graph=True)  # as the onnxrt backend's
    inputs, outputs = session.get_inputs()[0], session.get_outputs()[0]
    x = torch.randn([d if isinstance(d, int) else 1 for d in inputs.shape], dtype=torch.float16, device="cuda")
    y = torch.empty([d if isinstance(d, int) else 1 for d in outputs.shape], dtype=torch.float16, device="cuda")
    binding = session.io_binding()
    binding.bind_input("x", "cuda", 0, np.float16, tuple(x.shape), x.data_ptr())
    binding.bind_output("y", "cuda", 0, np.float16, tuple(y.shape), y.data_ptr())

    def replay():
        session.run_with_iobinding(binding)

    with torch.cuda.stream(stream):
        for _ in range(5):  # the first run captures the graph
            replay()
        torch.cuda.synchronize()
        walls = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(20):
                replay()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - start) / 20 * 1e6)
        table = kernel_table(replay, 20, top=4)
    return {"wall_us": statistics.median(walls), "gpu_us": table["us_per_step"],
            "kernels": table["kernels_per_step"],
            "top": [{"name": t["name"][:80], "us": round(t["us_per_step"], 1), "per_step": t["per_step"]}
                    for t in table["top"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shapes", default="2048x2048,2048x6144,2048x5120,768x768,768x2304,1024x1024",
                        help="comma-separated KxN: each chain alternates [K -> N] and [N -> K] products")
    parser.add_argument("--rows", default="1,8")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--linear-knobs", default="",
                        help="comma-separated NNDF_ORT_LINEAR_PDL=0 / NNDF_ORT_LINEAR_NORM_AHEAD=4 settings (joined "
                             "by '+' for several at once): the linear layouts are measured once with each, in new "
                             "sessions of the same graph (the kernel reads them at every launch)")
    args = parser.parse_args()
    layouts = args.layouts.split(",")
    for layout in layouts:
        if layout not in LAYOUTS:
            parser.error(f"layout {layout!r}: one of {', '.join(LAYOUTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = np.float16 if args.device == "cuda" else np.float32
    library = None
    if any(layout.startswith("linear") for layout in layouts):
        import torch

        arch = torch.cuda.get_device_capability(0) if args.device == "cuda" else None
        start = time.perf_counter()
        library = custom_ops.build(args.out / "ops", arch)
        print(json.dumps({"ops_library": str(library), "compile_s": round(time.perf_counter() - start, 1)}), flush=True)
    results = []
    for shape in args.shapes.split(","):
        k, n = (int(v) for v in shape.split("x"))
        weight_bytes = args.layers * k * n * np.dtype(dtype).itemsize
        for rows in (int(r) for r in args.rows.split(",")):
            for layout in layouts:
                with tempfile.TemporaryDirectory() as folder:
                    path = graph(layout, k, n, rows, args.layers, dtype, Path(folder), library)
                    knobs = args.linear_knobs.split(",") if layout.startswith("linear") and args.linear_knobs else [""]
                    for knob in knobs:
                        settings = dict(item.split("=", 1) for item in knob.split("+") if item)
                        os.environ.update(settings)
                        row = {"shape": shape, "rows": rows, "layout": layout, **({"knobs": knob} if knob else {}),
                               **measure(path, rows, k, args.layers, args.device, args.repeats)}
                        for key in settings:
                            del os.environ[key]
                        if "gpu_us" in row:
                            row["gpu_us_per_product"] = row["gpu_us"] / args.layers
                            row["weights_gb_s"] = weight_bytes / row["gpu_us"] / 1e3
                        results.append(row)
                        print(json.dumps({key: (round(v, 2) if isinstance(v, float) else v) for key, v in row.items()
                                          if key != "top"}), flush=True)
                (args.out / "layouts.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
