"""ONNX Runtime's CPU products at llama-offline's shapes, one node a graph, 1 and 32 rows: MatMul (fp32),
DynamicQuantizeMatMul (int8 weights, as the int8 graphs run after ONNX Runtime's fusion), MatMulNBits with 4-bit
blocks of 128 and accuracy level 4 (int8 activations, the int4 graphs' setting) and 1 (fp32); median of 300 calls
after 50. nbits_rows.py THREADS"""
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper

rng = np.random.default_rng(0)
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2


def session(kind: str, K: int, N: int, level: int = 4, block: int = 128):
    blocks = -(-K // block)
    x = helper.make_tensor_value_info("A", TP.FLOAT, [1, "s", K])
    y = helper.make_tensor_value_info("Y", TP.FLOAT, [1, "s", N])
    if kind == "nbits":
        w = rng.integers(0, 256, (N, blocks, block // 2), dtype=np.uint8)
        scales = rng.random(N * blocks, dtype=np.float32) * 0.01
        zeros = rng.integers(0, 256, (N * ((blocks + 1) // 2),), dtype=np.uint8)
        inits = [helper.make_tensor("B", TP.UINT8, w.shape, w.tobytes(), raw=True),
                 helper.make_tensor("s", TP.FLOAT, scales.shape, scales),
                 helper.make_tensor("zp", TP.UINT8, zeros.shape, zeros.tobytes(), raw=True)]
        node = helper.make_node("MatMulNBits", ["A", "B", "s", "zp"], ["Y"], domain="com.microsoft", K=K, N=N,
                                bits=4, block_size=block, accuracy_level=level)
    elif kind == "int8":
        w = rng.integers(-127, 127, (K, N), dtype=np.int8)
        inits = [helper.make_tensor("B", TP.INT8, w.shape, w.tobytes(), raw=True),
                 helper.make_tensor("s", TP.FLOAT, [], [0.01])]
        node = helper.make_node("DynamicQuantizeMatMul", ["A", "B", "s"], ["Y"], domain="com.microsoft")
    else:
        w = rng.standard_normal((K, N), dtype=np.float32)
        inits = [helper.make_tensor("B", TP.FLOAT, w.shape, w.ravel())]
        node = helper.make_node("MatMul", ["A", "B"], ["Y"])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


print(f"{threads} thread(s); us per call, median of 300")
for K, N in ((192, 320), (192, 192), (192, 1024), (512, 192), (192, 4096)):  # q/k/v, o, gate/up, down, head
    for rows in (1, 32):
        cells = []
        for kind, level in (("fp32", 0), ("int8", 0), ("nbits", 4), ("nbits", 1)):
            s = session(kind, K, N, level)
            feed = {"A": rng.standard_normal((1, rows, K), dtype=np.float32)}
            for _ in range(50):
                s.run(None, feed)
            times = []
            for _ in range(300):
                start = time.perf_counter()
                s.run(None, feed)
                times.append(time.perf_counter() - start)
            plain = {"fp32": "MatMul", "int8": "DynamicQuantizeMatMul"}
            name = f"MatMulNBits level {level}" if kind == "nbits" else plain[kind]
            cells.append(f"{name} {statistics.median(times) * 1e6:.1f}")
        print(f"K {K} N {N}, {rows} rows: " + ", ".join(cells))
