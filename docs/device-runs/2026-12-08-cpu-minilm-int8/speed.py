import time, numpy as np, onnx, onnxruntime as ort
from NNDF.backends.onnxrt.quantize import Int8
base = "temp/BERT/all-MiniLM-L6-v2/"
src = base + "encoder-feature-extraction-fp32-ortopt/encoder.onnx"
variants = {"fp32": src}
for name, attn, keep in (("int8", False, []), ("attn", True, []), ("attn-keep94", True, ["node_MatMul_94"]), ("attn-keep94-A5", True, ["node_MatMul_94", "Attention_5"])):
    p = f"/tmp/qa/s-{name}.onnx"; onnx.save(Int8(attn).apply(onnx.load(src), frozenset(keep)), p); variants[name] = p
so = ort.SessionOptions(); so.intra_op_num_threads = 2
sess = {k: ort.InferenceSession(v, so, providers=["CPUExecutionProvider"]) for k, v in variants.items()}
rng = np.random.default_rng(1)
times = {k: [] for k in sess}
for r in range(12):
    for k, s in sess.items():
        ids = rng.integers(1000, 30000, size=(8, 128)).astype(np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        s.run(None, feed); time.sleep(0.05)
        t = time.perf_counter(); s.run(None, feed); times[k].append(time.perf_counter() - t)
for k, v in times.items():
    print(f"{k:16s} median {np.median(v)*1e3:.1f} ms  q1 {np.percentile(v,25)*1e3:.1f} q3 {np.percentile(v,75)*1e3:.1f}")
