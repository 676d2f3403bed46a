import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper, helper
base = "temp/BERT/all-MiniLM-L6-v2/"
src = base + "encoder-feature-extraction-fp32-ortopt/encoder.onnx"
m = onnx.load(src)
init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
prods = [n for n in m.graph.node if n.op_type in ("Attention", "MatMul") and n.input[1] in init]
extra = sorted({n.input[0] for n in prods})
for x in extra:
    m.graph.output.append(helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None))
so = ort.SessionOptions(); so.intra_op_num_threads = 2; so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
acts = {x: [] for x in extra}
for i in range(8):
    L = int(rng.integers(8, 64)); ids = rng.integers(1000, 30000, size=(1, L)); ids[0,0]=101; ids[0,-1]=102
    out = s.run(extra, {"input_ids": ids.astype(np.int64), "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
    for x, a in zip(extra, out): acts[x].append(a.reshape(-1, a.shape[-1]))
def qact(a):  # uint8 asymmetric per tensor, as DynamicQuantizeLinear
    lo, hi = min(a.min(), 0), max(a.max(), 0); sc = (hi - lo) / 255; zp = np.round(-lo / sc)
    return (np.clip(np.round(a / sc) + zp, 0, 255) - zp) * sc
def qw(w):
    sc = np.abs(w).max(axis=0) / 127; return np.round(w / sc) * sc
for n in prods:
    w = init[n.input[1]].astype(np.float64); wq = qw(w)
    errs = []
    for a in acts[n.input[0]]:
        a = a.astype(np.float64); y = a @ w; yq = qact(a) @ wq
        errs.append(np.linalg.norm(yq - y) / np.linalg.norm(y))
    print(f"{n.name:18s} {n.op_type:9s} rel err {np.mean(errs):.4f}  act absmax {max(np.abs(a).max() for a in acts[n.input[0]]):.1f}")
