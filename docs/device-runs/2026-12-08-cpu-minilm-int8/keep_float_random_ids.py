import sys, numpy as np, onnx, onnxruntime as ort
from NNDF.backends.onnxrt.quantize import Int8
base = "temp/BERT/all-MiniLM-L6-v2/"
src = base + "encoder-feature-extraction-fp32-ortopt/encoder.onnx"
so = ort.SessionOptions(); so.intra_op_num_threads = 2
sf = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
feeds = []
for i in range(16):
    L = int(rng.integers(8, 64))
    ids = rng.integers(1000, 30000, size=(1, L)); ids[0, 0] = 101; ids[0, -1] = 102
    feeds.append({"input_ids": ids.astype(np.int64), "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
ref = [sf.run(None, f)[0][0].astype(np.float64) for f in feeds]
fp = onnx.load(src)
names = [n.name for n in fp.graph.node if n.op_type in ("Attention", "MatMul")]
def score(keep):
    m = Int8(True).apply(onnx.load(src), frozenset(keep))
    onnx.save(m, "/tmp/qa/v3.onnx")
    s = ort.InferenceSession("/tmp/qa/v3.onnx", so, providers=["CPUExecutionProvider"])
    c = np.array([a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in ((r, s.run(None, f)[0][0].astype(np.float64)) for r, f in zip(ref, feeds))])
    return c.mean(), c.min()
print("none", score([]))
for n in names:
    print(n, score([n]))
