"""MiniLM at 8 x 128 run whole and in chunks of 4, 2 and 1 sequences, interleaved: minilm_chunks.py GRAPH."""
import sys, numpy as np, onnxruntime as ort, time, statistics
path = sys.argv[1]; B, S = 8, 128
o = ort.SessionOptions(); o.intra_op_num_threads = 2; o.log_severity_level = 3
s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"], disabled_optimizers=["SkipLayerNormFusion"])
rng = np.random.default_rng(0)
def feeds(b):
    return {"input_ids": rng.integers(1000, 30000, (b, S)).astype(np.int64), "attention_mask": np.ones((b, S), np.int64),
            "token_type_ids": np.zeros((b, S), np.int64)}
F = {c: [feeds(c) for _ in range(B // c)] for c in (8, 4, 2, 1)}
for c in F:
    for f in F[c]: s.run(None, f)
res = {c: [] for c in F}
for r in range(12):
    for c in F:
        time.sleep(0.05)
        t = time.perf_counter()
        for f in F[c]: s.run(None, f)
        res[c].append(time.perf_counter() - t)
for c, v in res.items():
    print(f"chunks of {c}: {statistics.median(v)*1e3:.2f} ms for 8x128 (min {min(v)*1e3:.2f})")
