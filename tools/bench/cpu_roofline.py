#!/usr/bin/env python3
"""What bounds a BERT-like encoder's forward on this CPU: the memory read bandwidth, ONNX Runtime's CPU products
(MLAS) at the encoder's shapes and their sum over its layers, and optionally the optimized graph built with more
of ONNX Runtime's fusions left out, timed against ours interleaved.

    python tools/bench/cpu_roofline.py [--hidden 384 --ffn 1536 --layers 6] [--tokens 16 1024] [--threads 2]
    python tools/bench/cpu_roofline.py --plain temp/BERT/all-MiniLM-L6-v2/encoder-feature-extraction-fp32/encoder.onnx \
        --heads 12 --unfuse attention --shapes 1x16 8x128

Each product is one MatMul graph (weights as an initializer, as the exported encoders hold them), timed alone
(median of repeated runs, so its weights sit in the caches between runs): tokens x hidden by hidden x 3 hidden
(the fused q/k/v), hidden x hidden, hidden x ffn and ffn x hidden. `--plain`: the plain export optimized as the
onnxrt backend does for the CPU (`Encoder.export.optimize_for_ort`), and again with the fusions named by
`--unfuse` also left out (`FusionOptions` names: attention, bias_gelu, ...); both timed at each B x T shape in
interleaved rounds with 0.2 s idle before each call, through the backend's CPU session settings.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root


def median(run, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def read_bandwidth(mb: float, threads: int) -> float:
    """GB/s summing `mb` megabytes of fp32 (torch, `threads` threads), read again and again."""
    torch.set_num_threads(threads)
    data = torch.randn(int(mb * 1e6 / 4))
    return mb / 1e3 / median(lambda: data.sum(), 20)


def product_session(tokens: int, k: int, n: int, threads: int):
    weight = np.random.default_rng(0).standard_normal((k, n), dtype=np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "product",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, n])],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((tokens, k), dtype=np.float32)
    return lambda: session.run(None, {"x": x})


def products(hidden: int, ffn: int, layers: int, tokens: int, threads: int) -> None:
    total = 0.0
    for k, n in ((hidden, 3 * hidden), (hidden, hidden), (hidden, ffn), (ffn, hidden)):
        seconds = median(product_session(tokens, k, n, threads), 40 if tokens <= 64 else 12)
        total += seconds
        print(f"  [{tokens}, {k}] x [{k}, {n}]: {seconds * 1e3:.3f} ms, {2 * tokens * k * n / seconds / 1e9:.0f} "
              f"GFLOP/s, its weights at {k * n * 4 / seconds / 1e9:.1f} GB/s")
    print(f"  {tokens} tokens: a layer's four products {total * 1e3:.3f} ms, x {layers} layers "
          f"{layers * total * 1e3:.2f} ms")


def graphs(plain: Path, heads: int, hidden: int, unfuse: list[str], shapes: list[str], rounds: int,
           threads: int) -> None:
    from Encoder import export
    from NNDF.backends.onnxrt.steps import make_session

    sessions = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("ours", ()), ("without " + "+".join(unfuse), tuple(unfuse))):
            saved = export.CPU_UNFUSED
            export.CPU_UNFUSED = saved + extra
            try:
                out = Path(tmp) / name.replace(" ", "_") / "encoder.onnx"
                out.parent.mkdir()
                stats = export.optimize_for_ort(plain, out, SimpleNamespace(heads=heads, hidden=hidden), False)
            finally:
                export.CPU_UNFUSED = saved
            print(f"  {name}: {stats}")
            sessions[name] = make_session(out, torch.device("cpu"), threads=threads)
        rng = np.random.default_rng(0)
        for shape in shapes:
            batch, length = (int(v) for v in shape.split("x"))
            times = {name: [] for name in sessions}
            for _ in range(rounds):
                for name, session in sessions.items():
                    wanted = {i.name for i in session.get_inputs()}
                    feeds = {"input_ids": rng.integers(1000, 20000, (batch, length)),
                             "attention_mask": np.ones((batch, length), np.int64),
                             "token_type_ids": np.zeros((batch, length), np.int64)}
                    feeds = {k: v.astype(np.int64) for k, v in feeds.items() if k in wanted}
                    time.sleep(0.2)
                    session.run(None, feeds)
                    times[name].append(median(lambda: session.run(None, feeds), 4 if length > 64 else 20, 0))
            print(f"  {shape}: " + ", ".join(f"{name} {np.median(t) * 1e3:.2f} ms" for name, t in times.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--ffn", type=int, default=1536)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--tokens", type=int, nargs="+", default=[16, 1024])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--plain", type=Path, help="an encoder's plain export (encoder.onnx)")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--unfuse", nargs="+", default=["attention"])
    parser.add_argument("--shapes", nargs="+", default=["1x16", "8x128"])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    ort.set_default_logger_severity(3)
    weights = args.layers * (4 * args.hidden ** 2 + 2 * args.hidden * args.ffn) * 4 / 1e6
    print(f"read bandwidth ({args.threads} threads): 256 MB {read_bandwidth(256, args.threads):.1f} GB/s; the "
          f"layers' {weights:.1f} MB of fp32 weights {read_bandwidth(weights, args.threads):.1f} GB/s")
    for tokens in args.tokens:
        products(args.hidden, args.ffn, args.layers, tokens, args.threads)
    if args.plain:
        graphs(args.plain, args.heads, args.hidden, args.unfuse, args.shapes, args.rounds, args.threads)


if __name__ == "__main__":
    main()
